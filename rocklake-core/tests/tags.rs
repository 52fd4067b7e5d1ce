//! The tag registry obeys the allocation rules, and the checked-in document matches it.

use rocklake_core::tags::{self, KeyLen, Origin, TagRange, REGISTRY};

#[test]
fn no_duplicate_byte_or_name_and_sorted() {
    for w in REGISTRY.windows(2) {
        assert!(
            w[0].tag.0 < w[1].tag.0,
            "registry must be sorted without duplicates: {:?} {:?}",
            w[0].tag,
            w[1].tag
        );
    }
    for (i, a) in REGISTRY.iter().enumerate() {
        for b in &REGISTRY[i + 1..] {
            assert_ne!(a.name, b.name);
        }
    }
}

#[test]
fn zero_is_never_allocated_and_extended_range_is_empty() {
    assert!(tags::lookup(0x00).is_none());
    for b in 0x20..=0x7F {
        assert!(
            tags::lookup(b).is_none(),
            "{b:#04x} is in the extended range, which holds nothing yet"
        );
    }
}

#[test]
fn range_matches_the_byte_and_high_bit_marks_internal_and_system() {
    for t in REGISTRY {
        assert_eq!(TagRange::of(t.tag.0), Some(t.range), "{}", t.name);
        let high = t.tag.0 & 0x80 != 0;
        assert_eq!(
            high,
            matches!(t.range, TagRange::Internal | TagRange::System),
            "{}",
            t.name
        );
    }
}

#[test]
fn sequential_inside_each_range() {
    let protocol: Vec<u8> = REGISTRY
        .iter()
        .filter(|t| t.range == TagRange::Protocol)
        .map(|t| t.tag.0)
        .collect();
    assert_eq!(
        protocol,
        (0x01..=0x1E).collect::<Vec<u8>>(),
        "protocol tags run from 0x01 without gaps"
    );
    // Internal: 0x80, 0x81 (the document's), then RockLake's own 0x82, 0x83 in sequence; 0xFD
    // is the document's own placement next to the system range.
    let internal: Vec<u8> = REGISTRY
        .iter()
        .filter(|t| t.range == TagRange::Internal)
        .map(|t| t.tag.0)
        .collect();
    assert_eq!(internal, vec![0x80, 0x81, 0x82, 0x83, 0xFD]);
    let system: Vec<u8> = REGISTRY
        .iter()
        .filter(|t| t.range == TagRange::System)
        .map(|t| t.tag.0)
        .collect();
    assert_eq!(system, vec![0xFE, 0xFF]);
}

#[test]
fn document_allocations_are_kept_exactly() {
    let expected = [
        (0x01, "ducklake_catalog", 9, false),
        (0x02, "ducklake_snapshot", 9, false),
        (0x03, "ducklake_table_snapshot", 17, false),
        (0x04, "ducklake_schema", 17, true),
        (0x05, "ducklake_table", 17, true),
        (0x06, "ducklake_column", 25, true),
        (0x07, "ducklake_data_file", 25, true),
        (0x08, "ducklake_delete_file", 25, true),
        (0x09, "ducklake_file_column_stats", 17, false),
        (0x0A, "ducklake_table_stats", 17, false),
        (0x0B, "ducklake_view", 17, true),
        (0x0C, "ducklake_macro", 17, true),
        (0x0D, "ducklake_tag", 9, false),
        (0x81, "audit_entry", 17, false),
        (0xFD, "inlined_insert", 25, true),
    ];
    for (byte, name, len, versioned) in expected {
        let t = tags::lookup(byte).unwrap();
        assert_eq!(
            (t.name, t.key_len, t.versioned, t.origin),
            (name, KeyLen::Fixed(len), versioned, Origin::Document)
        );
    }
    for byte in [0x80, 0xFE, 0xFF] {
        assert!(matches!(
            tags::lookup(byte).unwrap().key_len,
            KeyLen::Variable { .. }
        ));
    }
}

#[test]
fn every_ducklake_table_has_a_tag() {
    // The 28 tables of DuckLake 1.0 (the dynamic inlined-data tables live under 0xFD).
    let ducklake = [
        "ducklake_column",
        "ducklake_column_mapping",
        "ducklake_column_tag",
        "ducklake_data_file",
        "ducklake_delete_file",
        "ducklake_file_column_stats",
        "ducklake_file_partition_value",
        "ducklake_file_variant_stats",
        "ducklake_files_scheduled_for_deletion",
        "ducklake_inlined_data_tables",
        "ducklake_macro",
        "ducklake_macro_impl",
        "ducklake_macro_parameters",
        "ducklake_metadata",
        "ducklake_name_mapping",
        "ducklake_partition_column",
        "ducklake_partition_info",
        "ducklake_schema",
        "ducklake_schema_versions",
        "ducklake_snapshot",
        "ducklake_snapshot_changes",
        "ducklake_sort_expression",
        "ducklake_sort_info",
        "ducklake_table",
        "ducklake_table_column_stats",
        "ducklake_table_stats",
        "ducklake_tag",
        "ducklake_view",
    ];
    assert_eq!(ducklake.len(), 28);
    for name in ducklake {
        let t = tags::by_name(name).unwrap_or_else(|| panic!("{name} has no tag"));
        assert_eq!(t.range, TagRange::Protocol);
        assert!(
            matches!(t.key_len, KeyLen::Fixed(_)),
            "{name}: data-table keys are fixed-length"
        );
        if t.origin == Origin::DuckLake {
            assert!(t.tag.0 >= 0x0E);
        }
    }
}

#[test]
fn versioned_keys_end_in_begin_snapshot() {
    for t in REGISTRY {
        assert_eq!(
            t.versioned,
            t.key_fields.last() == Some(&"begin_snapshot"),
            "{}",
            t.name
        );
        if let KeyLen::Fixed(n) = t.key_len {
            assert_eq!(n, 1 + 8 * t.key_fields.len(), "{}", t.name);
        }
    }
}

#[test]
fn checked_in_document_matches_the_registry() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/tag-allocation.md");
    let rendered = tags::render_markdown();
    if std::env::var_os("ROCKLAKE_UPDATE_DOCS").is_some() {
        std::fs::write(path, &rendered).unwrap();
    }
    let on_disk = std::fs::read_to_string(path).unwrap_or_default();
    assert!(
        on_disk == rendered,
        "docs/tag-allocation.md differs from the registry in tags.rs; regenerate it with \
         ROCKLAKE_UPDATE_DOCS=1 cargo test -p rocklake-core --test tags"
    );
}

#[test]
fn lookup_answers_every_byte_like_a_search_of_the_registry() {
    for b in 0..=255u8 {
        let searched = rocklake_core::tags::REGISTRY.iter().find(|t| t.tag.0 == b);
        let looked_up = rocklake_core::tags::lookup(b);
        assert_eq!(
            looked_up.map(|t| t.name),
            searched.map(|t| t.name),
            "byte {b:#04x}"
        );
    }
}
