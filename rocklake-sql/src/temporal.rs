//! PostgreSQL's `interval` and `time with time zone` in their text forms: what PostgreSQL
//! accepts as input and what it prints (`IntervalStyle = postgres`, `DateStyle = ISO`).
//!
//! An interval is three independent fields, as in PostgreSQL: months, days and microseconds
//! (`1 year 2 mons 3 days 04:05:06.7` is 14 months, 3 days and 14 706 700 000 µs). A
//! `timetz` is a time of day in microseconds and a zone offset in seconds east of UTC.

/// An interval's three fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Interval {
    /// Months (a year is 12).
    pub months: i32,
    /// Days.
    pub days: i32,
    /// Microseconds.
    pub micros: i64,
}

const MICROS_PER_SEC: f64 = 1e6;
const MICROS_PER_DAY: f64 = 86_400e6;

impl Interval {
    /// The 16 bytes of PostgreSQL's binary form (µs, days, months, big-endian), which is also
    /// how a cell stores it.
    pub fn to_bytes(self) -> [u8; 16] {
        let mut b = [0u8; 16];
        b[..8].copy_from_slice(&self.micros.to_be_bytes());
        b[8..12].copy_from_slice(&self.days.to_be_bytes());
        b[12..].copy_from_slice(&self.months.to_be_bytes());
        b
    }

    /// The inverse of [`Interval::to_bytes`]; `None` unless `b` is 16 bytes.
    pub fn from_bytes(b: &[u8]) -> Option<Interval> {
        if b.len() != 16 {
            return None;
        }
        Some(Interval {
            micros: i64::from_be_bytes(b[..8].try_into().ok()?),
            days: i32::from_be_bytes(b[8..12].try_into().ok()?),
            months: i32::from_be_bytes(b[12..].try_into().ok()?),
        })
    }

    /// Parse PostgreSQL's interval input: `quantity unit` pairs (`1 year 2 mons`, `-3 days`,
    /// `1.5 hours`, abbreviations such as `min`, `h`, `yrs`), a clock part `[-]HH:MM[:SS[.f]]`,
    /// a bare number (seconds), an optional leading `@` and trailing `ago`. `Err` names the
    /// part that does not parse.
    pub fn parse(s: &str) -> Result<Interval, String> {
        let bad = |why: &str| format!("invalid input syntax for type interval: \"{s}\" ({why})");
        let mut tokens: Vec<String> = Vec::new();
        // Split "3days" into "3" "days", keep "04:05:06" and "-1.5" whole.
        for word in s.split_whitespace() {
            let cut = word
                .char_indices()
                .find(|(i, c)| *i > 0 && c.is_ascii_alphabetic())
                .map(|(i, _)| i);
            match cut {
                Some(i) if word[..i].chars().all(|c| "+-.0123456789".contains(c)) => {
                    tokens.push(word[..i].to_string());
                    tokens.push(word[i..].to_string());
                }
                _ => tokens.push(word.to_string()),
            }
        }
        let mut tokens: &[String] = &tokens;
        if tokens.first().map(String::as_str) == Some("@") {
            tokens = &tokens[1..];
        }
        let mut ago = false;
        if tokens.last().is_some_and(|t| t.eq_ignore_ascii_case("ago")) {
            ago = true;
            tokens = &tokens[..tokens.len() - 1];
        }
        if tokens.is_empty() {
            return Err(bad("empty"));
        }
        let (mut months, mut days, mut micros) = (0f64, 0f64, 0f64);
        let mut i = 0;
        while i < tokens.len() {
            let t = &tokens[i];
            if t.contains(':') {
                micros += clock_micros(t).ok_or_else(|| bad(t))?;
                i += 1;
                continue;
            }
            let n: f64 = t.parse().map_err(|_| bad(t))?;
            let Some(unit) = tokens.get(i + 1) else {
                micros += n * MICROS_PER_SEC;
                break;
            };
            let u = unit.to_ascii_lowercase();
            let u = u.trim_end_matches(',');
            match u {
                "millennium" | "millennia" | "millenniums" | "mil" | "mils" => {
                    months += n * 12_000.0
                }
                "century" | "centuries" | "c" | "cent" => months += n * 1_200.0,
                "decade" | "decades" | "dec" | "decs" => months += n * 120.0,
                "year" | "years" | "y" | "yr" | "yrs" => months += n * 12.0,
                "month" | "months" | "mon" | "mons" => months += n,
                "week" | "weeks" | "w" => days += n * 7.0,
                "day" | "days" | "d" => days += n,
                "hour" | "hours" | "h" | "hr" | "hrs" => micros += n * 3_600e6,
                "minute" | "minutes" | "m" | "min" | "mins" => micros += n * 60e6,
                "second" | "seconds" | "s" | "sec" | "secs" => micros += n * MICROS_PER_SEC,
                "millisecond" | "milliseconds" | "ms" | "msec" | "msecs" => micros += n * 1e3,
                "microsecond" | "microseconds" | "us" | "usec" | "usecs" => micros += n,
                _ => return Err(bad(unit)),
            }
            i += 2;
        }
        // Fractions spill downwards as PostgreSQL spills them: a month is 30 days, a day 24 h.
        let whole_months = months.trunc();
        days += (months - whole_months) * 30.0;
        let whole_days = days.trunc();
        micros += (days - whole_days) * MICROS_PER_DAY;
        let sign = if ago { -1.0 } else { 1.0 };
        let fits = |v: f64, max: f64| v.is_finite() && v.abs() <= max;
        if !fits(whole_months, f64::from(i32::MAX))
            || !fits(whole_days, f64::from(i32::MAX))
            || !fits(micros.round(), i64::MAX as f64)
        {
            return Err(format!("interval out of range: \"{s}\""));
        }
        Ok(Interval {
            months: (sign * whole_months) as i32,
            days: (sign * whole_days) as i32,
            micros: (sign * micros.round()) as i64,
        })
    }

    /// The unit-by-unit form DataFusion's interval parser reads (`14 months 3 days 5
    /// microseconds`), for handing a parsed interval on to DataFusion.
    pub fn to_datafusion_text(self) -> String {
        format!(
            "{} months {} days {} microseconds",
            self.months, self.days, self.micros
        )
    }

    /// PostgreSQL's output (`IntervalStyle = postgres`): `1 year 2 mons 3 days 04:05:06.7`,
    /// `-1 days +02:00:00`, `00:00:00` for zero.
    pub fn to_pg_text(self) -> String {
        let mut out = String::new();
        let mut zero = true;
        let mut before_negative = false;
        let mut part = |out: &mut String, v: i64, unit: &str| {
            if v == 0 {
                return;
            }
            if !zero {
                out.push(' ');
            }
            if before_negative && v > 0 {
                out.push('+');
            }
            out.push_str(&format!("{v} {unit}{}", if v == 1 { "" } else { "s" }));
            before_negative = v < 0;
            zero = false;
        };
        part(&mut out, i64::from(self.months / 12), "year");
        part(&mut out, i64::from(self.months % 12), "mon");
        part(&mut out, i64::from(self.days), "day");
        if zero || self.micros != 0 {
            let m = self.micros;
            let abs = m.unsigned_abs();
            let (h, rest) = (abs / 3_600_000_000, abs % 3_600_000_000);
            let (min, rest) = (rest / 60_000_000, rest % 60_000_000);
            let (sec, frac) = (rest / 1_000_000, rest % 1_000_000);
            if !zero {
                out.push(' ');
            }
            if m < 0 {
                out.push('-');
            } else if before_negative {
                out.push('+');
            }
            out.push_str(&format!("{h:02}:{min:02}:{sec:02}"));
            push_fraction(&mut out, frac);
        }
        out
    }
}

/// `.ffffff` without trailing zeros, nothing for 0.
fn push_fraction(out: &mut String, micros: u64) {
    if micros != 0 {
        let f = format!("{micros:06}");
        out.push('.');
        out.push_str(f.trim_end_matches('0'));
    }
}

/// `[+-]HH:MM[:SS[.f]]` as microseconds.
fn clock_micros(t: &str) -> Option<f64> {
    let (sign, body) = match t.as_bytes().first()? {
        b'-' => (-1.0, &t[1..]),
        b'+' => (1.0, &t[1..]),
        _ => (1.0, t),
    };
    let parts: Vec<&str> = body.split(':').collect();
    if !(2..=3).contains(&parts.len()) {
        return None;
    }
    let h: u64 = parts[0].parse().ok()?;
    let m: u64 = parts[1].parse().ok()?;
    let s: f64 = match parts.get(2) {
        Some(s) if !s.is_empty() && s.chars().all(|c| c.is_ascii_digit() || c == '.') => {
            s.parse().ok()?
        }
        Some(_) => return None,
        None => 0.0,
    };
    if m >= 60 || s >= 60.0 {
        return None;
    }
    Some(sign * ((h * 3_600 + m * 60) as f64 * MICROS_PER_SEC + s * MICROS_PER_SEC))
}

/// A `time with time zone`: a time of day and a zone offset.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TimeTz {
    /// Microseconds since midnight (0 to 24:00:00 inclusive, as in PostgreSQL).
    pub micros: i64,
    /// The zone's offset in seconds east of UTC (`+02` is 7200).
    pub offset_secs: i32,
}

impl TimeTz {
    /// Parse `HH:MM[:SS[.f]][±HH[:MM[:SS]]]` (also `±HHMM`); no zone means UTC, the
    /// session's time zone.
    pub fn parse(s: &str) -> Result<TimeTz, String> {
        let bad = || format!("invalid input syntax for type time with time zone: \"{s}\"");
        let t = s.trim();
        let (clock, zone) = match t.rfind(['+', '-']) {
            Some(i) if i > 0 => (t[..i].trim(), Some(t[i..].trim())),
            _ => (t, None),
        };
        let micros = clock_micros(clock).ok_or_else(bad)?;
        if !(0.0..=MICROS_PER_DAY).contains(&micros) || clock.starts_with(['+', '-']) {
            return Err(bad());
        }
        let offset_secs = match zone {
            None => 0,
            Some(z) => {
                let sign = if z.starts_with('-') { -1 } else { 1 };
                let body = &z[1..];
                let fields: Vec<&str> = if body.contains(':') {
                    body.split(':').collect()
                } else if body.len() == 4 && body.chars().all(|c| c.is_ascii_digit()) {
                    vec![&body[..2], &body[2..]]
                } else {
                    vec![body]
                };
                if fields.is_empty() || fields.len() > 3 {
                    return Err(bad());
                }
                let mut secs = 0i32;
                for (f, scale) in fields.iter().zip([3600, 60, 1]) {
                    let v: i32 = f.parse().map_err(|_| bad())?;
                    if !f.chars().all(|c| c.is_ascii_digit()) || (scale != 3600 && v >= 60) {
                        return Err(bad());
                    }
                    secs += v * scale;
                }
                if secs > 15 * 3600 + 59 * 60 + 59 {
                    return Err(format!("time zone displacement out of range: \"{s}\""));
                }
                sign * secs
            }
        };
        Ok(TimeTz {
            micros: micros.round() as i64,
            offset_secs,
        })
    }

    /// PostgreSQL's output: `12:34:56.789+02`, `01:02:03-05:30`.
    pub fn to_pg_text(self) -> String {
        let m = self.micros.unsigned_abs();
        let mut out = format!(
            "{:02}:{:02}:{:02}",
            m / 3_600_000_000,
            m / 60_000_000 % 60,
            m / 1_000_000 % 60
        );
        push_fraction(&mut out, m % 1_000_000);
        let o = self.offset_secs.unsigned_abs();
        out.push(if self.offset_secs < 0 { '-' } else { '+' });
        out.push_str(&format!("{:02}", o / 3600));
        if !o.is_multiple_of(3600) {
            out.push_str(&format!(":{:02}", o / 60 % 60));
            if !o.is_multiple_of(60) {
                out.push_str(&format!(":{:02}", o % 60));
            }
        }
        out
    }

    /// PostgreSQL's binary form: µs (int8), then the offset in seconds *west* of UTC (int4).
    pub fn to_bytes(self) -> [u8; 12] {
        let mut b = [0u8; 12];
        b[..8].copy_from_slice(&self.micros.to_be_bytes());
        b[8..].copy_from_slice(&(-self.offset_secs).to_be_bytes());
        b
    }

    /// The inverse of [`TimeTz::to_bytes`]; `None` unless `b` is 12 bytes.
    pub fn from_bytes(b: &[u8]) -> Option<TimeTz> {
        if b.len() != 12 {
            return None;
        }
        Some(TimeTz {
            micros: i64::from_be_bytes(b[..8].try_into().ok()?),
            offset_secs: -i32::from_be_bytes(b[8..].try_into().ok()?),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn iv(s: &str) -> String {
        Interval::parse(s).unwrap().to_pg_text()
    }

    #[test]
    fn intervals_print_as_postgresql_prints_them() {
        // Each pair was checked against PostgreSQL 15 (`SELECT '<input>'::interval`).
        for (input, pg) in [
            (
                "1 year 2 months 3 days 04:05:06.7",
                "1 year 2 mons 3 days 04:05:06.7",
            ),
            ("0", "00:00:00"),
            ("1 day", "1 day"),
            ("-1 day 2 hours", "-1 days +02:00:00"),
            ("-1 days -02:00:00", "-1 days -02:00:00"),
            ("1.5 years", "1 year 6 mons"),
            ("1.5 days", "1 day 12:00:00"),
            ("100 hours", "100:00:00"),
            ("-3 mons", "-3 mons"),
            ("@ 1 min ago", "-00:01:00"),
            ("2 weeks 30 seconds", "14 days 00:00:30"),
            ("-1 year +2 mons", "-10 mons"),
            ("1 mon -1 days", "1 mon -1 days"),
            ("00:00:00.000001", "00:00:00.000001"),
            ("10:30", "10:30:00"),
        ] {
            assert_eq!(iv(input), pg, "{input}");
            // PostgreSQL's output reads back as the same interval.
            assert_eq!(iv(pg), pg, "{pg}");
        }
        for bad in ["", "1 fortnight", "x days", "1:2:3:4", "12:61"] {
            let e = Interval::parse(bad).unwrap_err();
            assert!(e.contains("interval"), "{bad}: {e}");
        }
        assert!(Interval::parse("99999999999 years")
            .unwrap_err()
            .contains("out of range"));
    }

    #[test]
    fn interval_bytes_are_postgresql_binary_form() {
        let v = Interval::parse("1 year 2 mons 3 days 00:00:01").unwrap();
        let b = v.to_bytes();
        assert_eq!(&b[..8], &1_000_000i64.to_be_bytes());
        assert_eq!(&b[8..12], &3i32.to_be_bytes());
        assert_eq!(&b[12..], &14i32.to_be_bytes());
        assert_eq!(Interval::from_bytes(&b), Some(v));
        assert_eq!(Interval::from_bytes(&b[..15]), None);
    }

    #[test]
    fn timetz_reads_and_prints_as_postgresql() {
        for (input, pg) in [
            ("12:34:56+02", "12:34:56+02"),
            ("12:34:56.789+02:30", "12:34:56.789+02:30"),
            ("01:02:03-0530", "01:02:03-05:30"),
            ("23:59:59.999999", "23:59:59.999999+00"),
            ("00:00:00-00", "00:00:00+00"),
        ] {
            let t = TimeTz::parse(input).unwrap();
            assert_eq!(t.to_pg_text(), pg, "{input}");
            assert_eq!(TimeTz::from_bytes(&t.to_bytes()), Some(t));
        }
        let t = TimeTz::parse("12:00:00+02").unwrap();
        assert_eq!(&t.to_bytes()[8..], &(-7200i32).to_be_bytes());
        for bad in ["25:00:00+02", "x", "12:00:00+16", "-01:00:00"] {
            assert!(TimeTz::parse(bad).is_err(), "{bad}");
        }
    }
}
