//! `rocklake verify` on a real store (SlateDB on a folder) with corruption written raw under
//! the key space: each kind of damage is one `FINDING` line, and the command exits 2.

use std::process::Command;

use rocklake::keys::{self, row_key};
use rocklake::keystone;
use rocklake::values::Row;
use rocklake::{Durability, Value, WriteBatch};

fn rocklake(args: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_rocklake"))
        .args(args)
        .output()
        .expect("run rocklake");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_reports_each_kind_of_raw_corruption_and_exits_2() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("file://{}", dir.path().join("lake").display());
    let (code, _, err) = rocklake(&["init", &url]);
    assert_eq!(code, Some(0), "{err}");
    let (code, _, err) = rocklake(&["insert", &url, "--space", "table", "--id", "500"]);
    assert_eq!(code, Some(0), "{err}");
    let (code, out, err) = rocklake(&["verify", &url]);
    assert_eq!(
        code,
        Some(0),
        "a store written by the command is clean: {out}{err}"
    );

    // The damage, written raw under the key space (as a bug or a bad disk would).
    let table = keystone::TABLE.table.info().unwrap();
    let contradicting_key = row_key(keystone::TABLE.table, &[600, 1]);
    let contradicting = Row::new(1, vec![Value::Int(999)])
        .encode(table, &contradicting_key)
        .unwrap();
    let mut over_long = row_key(keystone::TABLE.table, &[601, 1]);
    over_long.extend_from_slice(&[0xAB, 0xCD]);
    let damage: Vec<(Vec<u8>, Vec<u8>, &str)> = vec![
        (
            keys::counter_key("next-audit-id").unwrap(),
            b"xyz".to_vec(),
            "counter \"next-audit-id\": corrupt value",
        ),
        (
            keys::system_key("writer-epoch").unwrap(),
            vec![1, 2],
            "system \"writer-epoch\": corrupt value",
        ),
        (
            keystone::TABLE.binding_key(7).to_vec(),
            vec![0xFF, 0xFF],
            "space=ducklake_table id=7: corrupt value",
        ),
        (vec![table.tag.0, 0, 0], vec![1], "is truncated: 3 bytes"),
        (over_long, vec![1], "is over-long: 19 bytes"),
        (
            vec![0x7E, 1, 2],
            vec![3],
            "has tag 0x7e, which this binary does not know",
        ),
        (
            contradicting_key,
            contradicting,
            "holds 999 but the key's id is 600",
        ),
    ];
    {
        let backend = rocklake::open(&url).await.unwrap();
        let mut batch = WriteBatch::new();
        for (k, v, _) in &damage {
            batch.put(k.clone(), v.clone());
        }
        backend.write(batch, Durability::Durable).await.unwrap();
        backend.close().await.unwrap();
    }

    let (code, out, err) = rocklake(&["verify", &url]);
    assert_eq!(code, Some(2), "verify exits 2 on findings: {out}{err}");
    let findings: Vec<&str> = out.lines().filter(|l| l.starts_with("FINDING ")).collect();
    assert_eq!(
        findings.len(),
        damage.len(),
        "one line per damaged key:\n{}",
        findings.join("\n")
    );
    for (_, _, says) in &damage {
        assert!(
            findings.iter().any(|f| f.contains(says)),
            "no finding says {says:?}:\n{}",
            findings.join("\n")
        );
    }
    assert!(
        out.contains(&format!("{} findings", damage.len())),
        "the summary counts them: {out}"
    );
}
