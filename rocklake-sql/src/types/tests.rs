use super::*;

#[test]
fn declared_types_parse_as_postgresql_spells_them() {
    for (t, want) in [
        ("BIGINT", SqlType::BigInt),
        ("VARCHAR", SqlType::Text),
        ("character varying(20)", SqlType::Text),
        ("TIMESTAMP WITH TIME ZONE", SqlType::TimestampTz),
        ("TIMESTAMP", SqlType::Timestamp),
        ("DOUBLE PRECISION", SqlType::Double),
        ("DECIMAL(18, 3)", SqlType::Numeric(18, 3)),
        ("DECIMAL(18,3)", SqlType::Numeric(18, 3)),
        ("UUID", SqlType::Uuid),
        ("BYTEA", SqlType::Bytea),
        ("INTEGER", SqlType::Integer),
    ] {
        assert_eq!(SqlType::parse(t).unwrap(), want, "{t}");
    }
    let e = SqlType::parse("GEOMETRY").unwrap_err();
    assert_eq!(e.code, state::NOT_SUPPORTED);
    assert!(e.message.contains("GEOMETRY"), "{e}");
    assert_eq!(
        SqlType::parse("NUMERIC(50, 2)").unwrap_err().code,
        state::OUT_OF_RANGE
    );
}

#[test]
fn cells_round_trip_through_arrow_for_every_type() {
    let cases: Vec<(SqlType, Value)> = vec![
        (SqlType::BigInt, Value::Int(-5)),
        (SqlType::Integer, Value::Int(7)),
        (SqlType::SmallInt, Value::Int(-3)),
        (SqlType::Boolean, Value::Bool(true)),
        (SqlType::Text, Value::Text("héllo".into())),
        (
            SqlType::Uuid,
            Value::Text("0f0e0d0c-0b0a-0908-0706-050403020100".into()),
        ),
        (SqlType::TimestampTz, Value::Int(1_700_000_000_123_456)),
        (SqlType::Timestamp, Value::Int(-1)),
        (SqlType::Date, Value::Int(19_000)),
        (SqlType::Time, Value::Int(3_600_000_001)),
        (SqlType::Bytea, Value::Bytes(vec![0, 255, 7])),
        (SqlType::Double, Value::Text("0.1".into())),
        (SqlType::Real, Value::Text("1.5".into())),
        (SqlType::Numeric(18, 3), Value::Text("-12.345".into())),
    ];
    for (ty, v) in cases {
        let cells = [&v, &Value::Null];
        let a = ty.to_array(&cells, &|| "t.c".into()).unwrap();
        assert_eq!(a.data_type(), &ty.arrow());
        assert_eq!(ty.cell(a.as_ref(), 0).unwrap(), v, "{ty:?}");
        assert_eq!(ty.cell(a.as_ref(), 1).unwrap(), Value::Null, "{ty:?}");
    }
}

#[test]
fn wrong_stored_cells_are_reported_as_corruption_naming_the_column() {
    let e = SqlType::BigInt
        .to_array(&[&Value::Text("x".into())], &|| {
            "ducklake_snapshot.snapshot_id".into()
        })
        .unwrap_err();
    assert_eq!(e.code, state::DATA_CORRUPTED);
    assert!(e.message.contains("ducklake_snapshot.snapshot_id"), "{e}");
}

#[test]
fn bytea_reads_postgresql_input_forms_and_refuses_bad_ones() {
    assert_eq!(parse_bytea("\\x7b22").unwrap(), b"{\"");
    assert_eq!(parse_bytea("a\\\\b\\101").unwrap(), b"a\\bA");
    assert!(parse_bytea("\\x7").unwrap_err().contains("odd"));
    assert!(parse_bytea("\\xzz").unwrap_err().contains("hexadecimal"));
    assert!(parse_bytea("a\\9").unwrap_err().contains("backslash"));
    let a: ArrayRef = Arc::new(StringArray::from(vec![Some("\\x00ff"), None]));
    let b = SqlType::Bytea.coerce(&a, "c").unwrap();
    assert_eq!(
        SqlType::Bytea.cell(b.as_ref(), 0).unwrap(),
        Value::Bytes(vec![0, 255])
    );
    assert_eq!(pg_text(b.as_ref(), 0).as_deref(), Some("\\x00ff"));
}

#[test]
fn text_forms_are_postgresql_s() {
    let f: ArrayRef = Arc::new(Float64Array::from(vec![0.1, 1e20, 1.5e-7, f64::NAN, 2.0]));
    let got: Vec<_> = (0..5).map(|i| pg_text(f.as_ref(), i).unwrap()).collect();
    assert_eq!(got, ["0.1", "1e+20", "1.5e-07", "NaN", "2"]);
    let t = SqlType::TimestampTz
        .to_array(
            &[&Value::Int(1_795_994_477_336_452), &Value::Int(0)],
            &|| "t".into(),
        )
        .unwrap();
    assert_eq!(
        pg_text(t.as_ref(), 0).unwrap(),
        "2026-11-29 23:21:17.336452+00"
    );
    assert_eq!(pg_text(t.as_ref(), 1).unwrap(), "1970-01-01 00:00:00+00");
    let b = SqlType::Boolean
        .to_array(&[&Value::Bool(true), &Value::Null], &|| "b".into())
        .unwrap();
    assert_eq!(pg_text(b.as_ref(), 0).as_deref(), Some("t"));
    assert_eq!(pg_text(b.as_ref(), 1), None);
}

#[test]
fn array_types_parse_in_every_spelling_postgresql_takes() {
    for t in [
        "INTEGER[]",
        "int4[3]",
        "integer[][]",
        "integer array",
        "_int4",
    ] {
        assert_eq!(
            SqlType::parse(t).unwrap(),
            SqlType::Array(Elem::Integer),
            "{t}"
        );
    }
    assert_eq!(
        SqlType::parse("NUMERIC(10, 2)[]").unwrap(),
        SqlType::Array(Elem::Numeric(10, 2))
    );
    let e = SqlType::parse("_int4[]").unwrap_err();
    assert_eq!(e.code, state::NOT_SUPPORTED);
    assert!(e.message.contains("arrays of arrays"), "{e}");
}

#[test]
fn array_text_is_read_and_written_as_postgresql_does() {
    let got = parse_array_literal(r#" { 1 , "a b",NULL,"NULL", c\"d , "" } "#).unwrap();
    let want = [
        Some("1"),
        Some("a b"),
        None,
        Some("NULL"),
        Some("c\"d"),
        Some(""),
    ];
    assert_eq!(got, want.map(|w| w.map(str::to_string)));
    assert_eq!(parse_array_literal("{}").unwrap(), vec![]);
    for bad in [
        "{1,2",
        "1,2",
        "{1,,2}",
        "{{1},{2}}",
        "{\"a\"b}",
        "[1:2]={1,2}",
    ] {
        let e = parse_array_literal(bad).unwrap_err();
        assert!(
            e.message.starts_with("malformed array literal"),
            "{bad}: {e}"
        );
        assert_eq!(e.code, "22P02", "{bad}");
    }
    let items = ["1", "a b", "", "NULL", "q\"x", "b\\s", "{}"].map(|s| Some(s.to_string()));
    let mut items = items.to_vec();
    items.push(None);
    assert_eq!(
        array_literal(&items),
        r#"{1,"a b","","NULL","q\"x","b\\s","{}",NULL}"#
    );
    assert_eq!(parse_array_literal(&array_literal(&items)).unwrap(), items);
}

#[test]
fn array_cells_round_trip_and_bad_elements_name_their_type() {
    for (ty, text) in [
        (Elem::Integer, "{1,NULL,-3}"),
        (Elem::BigInt, "{9223372036854775807}"),
        (Elem::SmallInt, "{}"),
        (Elem::Boolean, "{t,f,NULL}"),
        (Elem::Text, r#"{"a b",c,""}"#),
        (Elem::Uuid, "{a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11}"),
        (Elem::Date, "{2024-01-02}"),
        (
            Elem::Timestamp,
            r#"{"1999-12-31 23:59:59.5","2000-01-01 00:00:00"}"#,
        ),
        (Elem::TimestampTz, r#"{"2026-11-29 23:21:17.336452+00"}"#),
        (Elem::Time, "{12:34:56.789,00:00:00}"),
        (Elem::TimeTz, "{12:34:56.789+02,00:00:00-05:30}"),
        (
            Elem::Interval,
            r#"{"1 year 2 mons 3 days 04:05:06.7","-1 days +02:00:00"}"#,
        ),
        (Elem::Bytea, r#"{"\\xdeadbeef","\\x"}"#),
        (Elem::Double, "{1.5,Infinity,NaN,-0.25,1e+20}"),
        (Elem::Real, "{0.1}"),
        (Elem::Numeric(10, 2), "{1.50,-2.00}"),
    ] {
        let ty = SqlType::Array(ty);
        let v = Value::Text(text.into());
        let a = ty.to_array(&[&v, &Value::Null], &|| "t.c".into()).unwrap();
        assert_eq!(a.data_type(), &ty.arrow());
        assert_eq!(ty.cell(a.as_ref(), 0).unwrap(), v, "{ty:?}");
        assert_eq!(ty.cell(a.as_ref(), 1).unwrap(), Value::Null, "{ty:?}");
    }
    let ty = SqlType::Array(Elem::Integer);
    let bad: ArrayRef = Arc::new(StringArray::from(vec!["{1,x}"]));
    let e = ty.coerce(&bad, "c").unwrap_err();
    assert_eq!(e.code, state::INVALID_TEXT);
    assert!(
        e.message
            .contains("invalid input syntax for type integer: \"x\""),
        "{e}"
    );
    let big: ArrayRef = Arc::new(StringArray::from(vec!["{99999}"]));
    let e = SqlType::Array(Elem::SmallInt)
        .coerce(&big, "c")
        .unwrap_err();
    assert_eq!(e.code, state::OUT_OF_RANGE, "{e}");
    let e = ty
        .to_array(&[&Value::Text("{1".into())], &|| "t.c".into())
        .unwrap_err();
    assert_eq!(e.code, state::DATA_CORRUPTED);
    assert!(e.message.contains("t.c"), "{e}");
}

#[test]
fn uuids_take_postgresql_input_forms() {
    assert_eq!(
        canonical_uuid("{A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11}").unwrap(),
        "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"
    );
    assert_eq!(
        canonical_uuid("nope").unwrap_err().code,
        state::INVALID_TEXT
    );
}
