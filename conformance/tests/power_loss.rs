//! Power loss at the engine boundary, under the key space's real work (see
//! `conformance::power`). `ROCKLAKE_POWER_ROUNDS` sets the rounds (CI runs 10,000);
//! `ROCKLAKE_POWER_SEED` replays from a printed seed.

use conformance::power;

fn env_u64(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Ok(v) => v
            .parse()
            .unwrap_or_else(|_| panic!("{name}={v:?} is not a whole number")),
        Err(_) => default,
    }
}

#[test]
fn no_acknowledged_commit_is_lost_and_no_batch_is_half_there_after_a_power_loss() {
    let rounds = env_u64("ROCKLAKE_POWER_ROUNDS", 1000);
    let seed = env_u64("ROCKLAKE_POWER_SEED", rand::random::<u32>() as u64);
    eprintln!("power loss: {rounds} rounds from seed {seed} (replay: ROCKLAKE_POWER_SEED={seed})");
    let s = power::run(rounds, seed, 50).unwrap_or_else(|e| panic!("{e}"));
    eprintln!(
        "power loss: {} rounds, crashes {:?} by phase {:?}, {} without a crash; \
         {} commits acknowledged (lost: {}), {} refused, {} in flight at the crash, {} ids issued",
        s.rounds,
        s.crashes,
        s.phases,
        s.uncrashed,
        s.acknowledged,
        s.lost,
        s.refused,
        s.uncertain,
        s.issued
    );
    assert_eq!(s.rounds, rounds);
    assert_eq!(s.lost, 0);
    // Every kind of crash point was hit (with enough rounds to make that certain).
    if rounds >= 1000 {
        assert_eq!(s.crashes.len(), 7, "crash kinds hit: {:?}", s.crashes);
        assert!(
            s.acknowledged > rounds,
            "too little work acknowledged: {s:?}"
        );
    }
}
