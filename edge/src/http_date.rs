//! The `Date` header of every edge answer (RFC 9110 §5.6.7 IMF-fixdate, e.g.
//! `Sun, 06 Nov 1994 08:49:37 GMT`), written by the runtime when it turns a reply into a
//! response. The sale page corrects the browser's clock by it, so its countdown runs on the
//! edge's clock; workerd does not add one by itself. Formatted by `httpdate` (hyper's), from the
//! Worker clock's unix seconds: `SystemTime::now()` does not work in the Worker, but a
//! `SystemTime` built from a duration since the epoch does.

use std::time::{Duration, UNIX_EPOCH};

/// The last second `httpdate` formats (it panics from year 10000 on).
const LAST_SECOND: i64 = 253_402_300_799;

/// IMF-fixdate of unix time `secs` (floored to the second; clamped to years 1970..=9999).
pub fn format(secs: i64) -> String {
    let secs = u64::try_from(secs.clamp(0, LAST_SECOND)).unwrap_or(0);
    httpdate::fmt_http_date(UNIX_EPOCH + Duration::from_secs(secs))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn known_dates() {
        assert_eq!(format(0), "Thu, 01 Jan 1970 00:00:00 GMT");
        assert_eq!(format(784_111_777), "Sun, 06 Nov 1994 08:49:37 GMT");
        assert_eq!(format(951_782_400), "Tue, 29 Feb 2000 00:00:00 GMT");
        assert_eq!(format(1_796_092_904), "Tue, 01 Dec 2026 02:41:44 GMT");
        assert_eq!(format(-5), "Thu, 01 Jan 1970 00:00:00 GMT");
        assert_eq!(format(i64::MAX), "Fri, 31 Dec 9999 23:59:59 GMT");
    }

    proptest! {
        #[test]
        fn always_29_bytes_of_the_fixdate_shape(secs in 0i64..253_402_300_800) {
            let s = format(secs);
            prop_assert_eq!(s.len(), 29);
            prop_assert!(s.ends_with(" GMT"));
            prop_assert_eq!(&s[3..5], ", ");
        }
    }
}
