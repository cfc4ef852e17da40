//! W3C Trace Context (`traceparent`, `tracestate`) on the purchase path: the edge continues the
//! shopper's trace when the shopper sent a valid `traceparent`, or starts one, and forwards it
//! with the signed purchase so the origin's spans join that trace (docs/operations.md, "Traces").
//!
//! The edge does not export spans of its own (Cloudflare's Workers tracing records the
//! invocation separately), so it forwards a caller's context as it came — the origin's `request`
//! span is then the child of the shopper's span — and when it starts a trace it picks the trace
//! id and the parent id itself, sampled (`01`): the origin's sampler (`OTEL_TRACES_SAMPLER`)
//! decides for those. A malformed `traceparent` never fails a request: it is replaced by a new
//! trace, and its `tracestate` dropped (as the specification says). Neither header is signed
//! (docs/signing.md): they only label telemetry.

/// Longest `tracestate` forwarded (the specification's limit for propagating it whole).
pub const MAX_TRACESTATE_LEN: usize = 512;
/// Most list members a forwarded `tracestate` may have.
pub const MAX_TRACESTATE_MEMBERS: usize = 32;

/// The trace context forwarded to the origin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceContext {
    traceparent: String,
    tracestate: Option<String>,
}

impl TraceContext {
    /// The caller's context when its `traceparent` is valid (its `tracestate` kept when
    /// well formed), else a new trace from `random` (128 bits of trace id, 64 of parent id).
    pub fn choose(
        traceparent: Option<&str>,
        tracestate: Option<&str>,
        random: impl FnOnce() -> [u64; 3],
    ) -> Self {
        if let Some(traceparent) = traceparent.and_then(parse_traceparent) {
            return Self {
                traceparent,
                tracestate: tracestate.and_then(parse_tracestate),
            };
        }
        let [a, mut b, mut c] = random();
        // All-zero ids are invalid: a zero draw (vanishingly rare) is replaced by 1.
        if a == 0 && b == 0 {
            b = 1;
        }
        if c == 0 {
            c = 1;
        }
        let mut traceparent = String::with_capacity(55);
        traceparent.push_str("00-");
        push_hex(&mut traceparent, a);
        push_hex(&mut traceparent, b);
        traceparent.push('-');
        push_hex(&mut traceparent, c);
        traceparent.push_str("-01");
        Self {
            traceparent,
            tracestate: None,
        }
    }

    /// The `traceparent` to forward (version `00`).
    pub fn traceparent(&self) -> &str {
        &self.traceparent
    }

    /// The trace id (32 lowercase hex digits).
    pub fn trace_id(&self) -> &str {
        self.traceparent.get(3..35).unwrap_or_default()
    }

    /// The `tracestate` to forward, if any.
    pub fn tracestate(&self) -> Option<&str> {
        self.tracestate.as_deref()
    }
}

/// Appends `v` as 16 lowercase hex digits (no `format!`: its integer formatting machinery costs
/// the worker's size budget more than this).
fn push_hex(out: &mut String, v: u64) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    for shift in (0..16).rev() {
        out.push(char::from(DIGITS[((v >> (shift * 4)) & 0xf) as usize]));
    }
}

fn lower_hex(s: &str) -> bool {
    s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// A valid `traceparent`, as version `00`: `version-traceid-parentid-flags`, lowercase hex, the
/// ids not all zero, version `00` exactly 55 characters; a higher version (not `ff`) may carry
/// more after a `-`, which is dropped.
fn parse_traceparent(raw: &str) -> Option<String> {
    let raw = raw.trim();
    let head = raw.get(..55)?;
    let rest = &raw[55..];
    let mut fields = head.split('-');
    let (version, trace_id, parent_id, flags) = (
        fields.next()?,
        fields.next()?,
        fields.next()?,
        fields.next()?,
    );
    let shaped = fields.next().is_none()
        && version.len() == 2
        && trace_id.len() == 32
        && parent_id.len() == 16
        && flags.len() == 2
        && lower_hex(version)
        && lower_hex(trace_id)
        && lower_hex(parent_id)
        && lower_hex(flags);
    if !shaped || version == "ff" {
        return None;
    }
    if version == "00" && !rest.is_empty()
        || version != "00" && !(rest.is_empty() || rest.starts_with('-'))
    {
        return None;
    }
    if trace_id.bytes().all(|b| b == b'0') || parent_id.bytes().all(|b| b == b'0') {
        return None;
    }
    // Version 00 defines one flag (sampled, the lowest bit); the others are forwarded cleared.
    let sampled = matches!(
        flags.as_bytes()[1],
        b'1' | b'3' | b'5' | b'7' | b'9' | b'b' | b'd' | b'f'
    );
    let mut out = String::with_capacity(55);
    out.push_str("00-");
    out.push_str(trace_id);
    out.push('-');
    out.push_str(parent_id);
    out.push_str(if sampled { "-01" } else { "-00" });
    Some(out)
}

/// A `tracestate` worth forwarding: at most [`MAX_TRACESTATE_LEN`] printable ASCII characters
/// and [`MAX_TRACESTATE_MEMBERS`] `key=value` members; anything else is dropped (the trace
/// continues without it).
fn parse_tracestate(raw: &str) -> Option<String> {
    let raw = raw.trim();
    if raw.is_empty()
        || raw.len() > MAX_TRACESTATE_LEN
        || !raw.bytes().all(|b| (0x20..=0x7e).contains(&b))
    {
        return None;
    }
    let members: Vec<&str> = raw
        .split(',')
        .map(|m| m.trim())
        .filter(|m| !m.is_empty())
        .collect();
    let well_formed = members.len() <= MAX_TRACESTATE_MEMBERS
        && members.iter().all(|m| {
            m.split_once('=')
                .is_some_and(|(k, v)| !k.is_empty() && !v.is_empty() && !k.contains(' '))
        });
    (well_formed && !members.is_empty()).then(|| members.join(","))
}

#[cfg(test)]
mod tests {
    use super::*;

    const VALID: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    fn never() -> [u64; 3] {
        panic!("no new trace expected")
    }

    #[test]
    fn a_valid_traceparent_is_continued_with_its_tracestate() {
        let cx = TraceContext::choose(
            Some(VALID),
            Some("congo=t61rcWkgMzE, rojo=00f067aa0ba902b7"),
            never,
        );
        assert_eq!(cx.traceparent(), VALID);
        assert_eq!(cx.trace_id(), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(
            cx.tracestate(),
            Some("congo=t61rcWkgMzE,rojo=00f067aa0ba902b7")
        );
        let unsampled = VALID.replace("-01", "-00");
        assert_eq!(
            TraceContext::choose(Some(&unsampled), None, never).traceparent(),
            unsampled
        );
    }

    #[test]
    fn a_higher_version_is_continued_as_version_00() {
        let future =
            "cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-09-what-the-future-holds";
        let cx = TraceContext::choose(Some(future), None, never);
        assert_eq!(cx.traceparent(), VALID);
    }

    #[test]
    fn a_malformed_traceparent_starts_a_new_trace_and_drops_tracestate() {
        let bad = [
            "",
            "garbage",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473-600f067aa0ba902b7-01",
            "00_4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7_01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0g",
            "cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-ü1",
        ];
        for raw in bad {
            let cx = TraceContext::choose(Some(raw), Some("congo=t61rcWkgMzE"), || {
                [0xabc, 0xdef, 0x123]
            });
            assert_eq!(
                cx.traceparent(),
                "00-0000000000000abc0000000000000def-0000000000000123-01",
                "{raw:?}"
            );
            assert_eq!(cx.tracestate(), None, "{raw:?}");
        }
    }

    #[test]
    fn a_new_trace_has_valid_ids() {
        let cx = TraceContext::choose(None, None, || [0, 0, 0]);
        assert_eq!(
            cx.traceparent(),
            "00-00000000000000000000000000000001-0000000000000001-01"
        );
        assert!(parse_traceparent(cx.traceparent()).is_some());
        let cx = TraceContext::choose(None, None, || [u64::MAX, 7, 9]);
        assert_eq!(cx.trace_id(), "ffffffffffffffff0000000000000007");
    }

    #[test]
    fn a_malformed_tracestate_is_dropped_and_the_trace_continued() {
        let many = (0..33)
            .map(|i| format!("k{i}=v"))
            .collect::<Vec<_>>()
            .join(",");
        let long = format!("k={}", "v".repeat(MAX_TRACESTATE_LEN));
        for raw in [
            "",
            " , ",
            "novalue",
            "=v",
            "k=",
            "k=v\u{7f}",
            "ü=v",
            &many,
            &long,
        ] {
            let cx = TraceContext::choose(Some(VALID), Some(raw), never);
            assert_eq!(cx.traceparent(), VALID);
            assert_eq!(cx.tracestate(), None, "{raw:?}");
        }
    }
}
