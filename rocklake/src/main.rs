//! The `rocklake` command (placeholder until the engines land): runs the Keystone walkthrough.
use rocklake_core::{keystone, Admin, Catalog, KeyChoice, MemoryBackend, Value};
use std::sync::Arc;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), rocklake_core::Error> {
    let cat = Catalog::open(Arc::new(MemoryBackend::new())).await?;
    let cells = || vec![Value::Null, Value::Text("demo".into())];
    for choice in [KeyChoice::Named(500), KeyChoice::Issued, KeyChoice::Named(100)] {
        let mut t = cat.begin().await?;
        let p = t.insert(&keystone::TABLE, choice, cells()).await?;
        t.commit().await?;
        println!("{p}");
    }
    let mut t = cat.begin().await?;
    if let Err(e) = t.insert(&keystone::TABLE, KeyChoice::Named(100), cells()).await {
        println!("ERR {e}");
    }
    drop(t);
    let _ = Admin::grant("demo");
    println!("{}", cat.describe(&keystone::TABLE).await?);
    Ok(())
}
