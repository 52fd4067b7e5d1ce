//! Multi-version visibility.
//!
//! A versioned row carries the half-open interval of snapshots it is visible at:
//! `[begin_snapshot, end_snapshot)`, with an unset end meaning "still live". A reader at snapshot
//! `S` sees a version when `begin <= S` and (`end` unset or `S < end`). Writers never change the
//! past: a new version starts at a snapshot newer than any a reader holds, and ending a version
//! sets its end to that new snapshot, so what a reader at `S` sees cannot change under it.
//!
//! Garbage collection may drop only versions that *ended at or before* the `retain-from` floor:
//! no reader is allowed below the floor, and a version with `end <= floor` is invisible at every
//! snapshot at or above it.

/// The MVCC interval of one version.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Version {
    /// First snapshot the version is visible at.
    pub begin: u64,
    /// First snapshot it is no longer visible at; `None` while live.
    pub end: Option<u64>,
}

impl Version {
    /// A live version from `begin`.
    pub const fn live(begin: u64) -> Version {
        Version { begin, end: None }
    }

    /// A version visible in `[begin, end)`.
    pub const fn ended(begin: u64, end: u64) -> Version {
        Version {
            begin,
            end: Some(end),
        }
    }

    /// Whether a reader at `snapshot` sees this version.
    #[inline]
    pub fn visible_at(&self, snapshot: u64) -> bool {
        self.begin <= snapshot && self.end.is_none_or(|end| snapshot < end)
    }

    /// Whether GC may drop this version given the `retain-from` floor.
    #[inline]
    pub fn collectable(&self, retain_from: u64) -> bool {
        self.end.is_some_and(|end| end <= retain_from)
    }

    /// Whether the interval is well formed (`end`, when set, is after `begin`).
    pub fn is_consistent(&self) -> bool {
        self.end.is_none_or(|end| end > self.begin)
    }
}

/// The latest version visible at `snapshot` among the versions of one entity.
///
/// Versions may come in any order; the one with the greatest `begin` that is visible wins
/// (for well-formed histories at most one is visible anyway).
pub fn latest_visible<T>(
    versions: impl IntoIterator<Item = (Version, T)>,
    snapshot: u64,
) -> Option<(Version, T)> {
    versions
        .into_iter()
        .filter(|(v, _)| v.visible_at(snapshot))
        .max_by_key(|(v, _)| v.begin)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    #[rstest]
    #[case::before_begin_is_invisible(Version::live(10), 9, false)]
    #[case::at_begin_is_visible(Version::live(10), 10, true)]
    #[case::live_is_visible_forever(Version::live(10), u64::MAX, true)]
    #[case::just_before_end_is_visible(Version::ended(10, 20), 19, true)]
    #[case::at_end_is_invisible(Version::ended(10, 20), 20, false)]
    #[case::after_end_is_invisible(Version::ended(10, 20), 25, false)]
    #[case::write_after_snapshot_is_invisible(Version::live(31), 30, false)]
    #[case::delete_after_snapshot_keeps_row_visible(Version::ended(5, 31), 30, true)]
    #[case::snapshot_zero_sees_nothing_begun_later(Version::live(1), 0, false)]
    fn visibility(#[case] v: Version, #[case] snapshot: u64, #[case] visible: bool) {
        assert_eq!(v.visible_at(snapshot), visible);
    }

    #[rstest]
    #[case::live_is_never_collected(Version::live(1), 100, false)]
    #[case::ended_below_floor_is_collected(Version::ended(1, 50), 100, true)]
    #[case::ended_at_floor_is_collected(Version::ended(1, 100), 100, true)]
    #[case::ended_above_floor_is_kept(Version::ended(1, 101), 100, false)]
    fn gc_only_below_the_floor(#[case] v: Version, #[case] floor: u64, #[case] collect: bool) {
        assert_eq!(v.collectable(floor), collect);
        if collect {
            // Nothing at or above the floor could see it.
            assert!(!v.visible_at(floor));
        }
    }

    #[rstest]
    #[case::picks_the_newest_visible(30, Some(20))]
    #[case::older_snapshot_sees_older_version(15, Some(10))]
    #[case::before_first_version_sees_none(5, None)]
    #[case::after_delete_sees_none(45, None)]
    fn latest_visible_version(#[case] snapshot: u64, #[case] begin: Option<u64>) {
        // Entity history: v1 [10,20), v2 [20,40): deleted at 40.
        let versions = vec![
            (Version::ended(20, 40), "v2"),
            (Version::ended(10, 20), "v1"),
        ];
        assert_eq!(
            latest_visible(versions, snapshot).map(|(v, _)| v.begin),
            begin
        );
    }
}
