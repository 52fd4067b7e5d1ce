//! Property tests of the key codec: round trip, byte order equals field order, prefix isolation.

use proptest::prelude::*;
use rocklake_core::backend::KeyRange;
use rocklake_core::keys::{self, Key};
use rocklake_core::tags::{KeyLen, REGISTRY};

fn fixed_tags() -> Vec<u8> {
    REGISTRY
        .iter()
        .filter(|t| matches!(t.key_len, KeyLen::Fixed(_)))
        .map(|t| t.tag.0)
        .collect()
}

fn any_fixed_key() -> impl Strategy<Value = (u8, Vec<u64>)> {
    proptest::sample::select(fixed_tags()).prop_flat_map(|tag| {
        let n = rocklake_core::tags::lookup(tag).unwrap().key_fields.len();
        (Just(tag), proptest::collection::vec(any::<u64>(), n))
    })
}

fn any_named_key() -> impl Strategy<Value = Vec<u8>> {
    (prop_oneof![Just(0xFEu8), Just(0xFFu8)], "[!-~]{1,40}").prop_map(|(tag, name)| {
        let mut k = vec![tag];
        k.extend_from_slice(name.as_bytes());
        k
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn round_trip((tag, fields) in any_fixed_key()) {
        let bytes = keys::row_key(rocklake_core::Tag(tag), &fields);
        let key = Key::decode(&bytes).unwrap();
        prop_assert_eq!(key.encode(), bytes.clone());
        prop_assert_eq!(key, Key::Row { tag: rocklake_core::Tag(tag), fields });
    }

    #[test]
    fn named_round_trip(bytes in any_named_key()) {
        let key = Key::decode(&bytes).unwrap();
        prop_assert_eq!(key.encode(), bytes);
    }

    #[test]
    fn byte_order_is_field_order((tag, a) in any_fixed_key(), seed in proptest::collection::vec(any::<u64>(), 3)) {
        let b: Vec<u64> = seed.into_iter().take(a.len()).collect();
        let ka = keys::row_key(rocklake_core::Tag(tag), &a);
        let kb = keys::row_key(rocklake_core::Tag(tag), &b);
        prop_assert_eq!(ka.cmp(&kb), a.cmp(&b));
    }

    #[test]
    fn prefix_of_one_tag_holds_no_key_of_another((tag, fields) in any_fixed_key(), other in any::<u8>()) {
        let range = KeyRange::prefix(&[other]);
        let bytes = keys::row_key(rocklake_core::Tag(tag), &fields);
        prop_assert_eq!(range.contains(&bytes), tag == other);
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
        match Key::decode(&bytes) {
            Ok(k) => prop_assert_eq!(k.encode(), bytes.clone()),
            Err(e) => prop_assert!(!e.to_string().is_empty()),
        }
        let _ = keys::render(&bytes);
        let _ = rocklake_core::values::render_value(&bytes, &bytes);
    }
}
