//! The `Date` header of every edge answer (RFC 9110 §5.6.7 IMF-fixdate, e.g.
//! `Sun, 06 Nov 1994 08:49:37 GMT`), written by the runtime when it turns a reply into a
//! response. The sale page corrects the browser's clock by it, so its countdown runs on the
//! edge's clock; workerd does not add one by itself.

const DAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
const MONTHS: [&str; 12] = [
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
];

/// IMF-fixdate of unix time `secs` (floored to the second; clamped to years 1970..=9999).
pub fn format(secs: i64) -> String {
    let secs = secs.clamp(0, 253_402_300_799);
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let (year, month, day) = civil_from_days(days);
    format!(
        "{}, {day:02} {} {year:04} {:02}:{:02}:{:02} GMT",
        DAYS[usize::try_from(days.rem_euclid(7)).unwrap_or(0)],
        MONTHS[usize::try_from(month - 1).unwrap_or(0)],
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// (year, month 1..=12, day 1..=31) of a day count since 1970-01-01 (Howard Hinnant's
/// `civil_from_days`).
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
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
