//! Unit tests of `server::conn`: phase packing and the per-connection state machine.

use super::*;

#[test]
fn phase_word_round_trips() {
    for phase in [Phase::Head, Phase::Request, Phase::Idle, Phase::Closing] {
        assert_eq!(unpack(pack(phase, 123_456)), (phase, 123_456));
    }
}

#[tokio::test]
async fn phases_move_only_along_the_allowed_edges() {
    let state = ConnState::new(Clock::new(), Arc::default());
    let t = Timeouts {
        header_read: Duration::from_millis(100),
        request: Duration::from_millis(1000),
        keepalive: Duration::from_millis(5000),
    };
    assert_eq!(state.phase().0, Phase::Fresh);
    assert!(
        !state.reclaim(),
        "a connection reading its head is not reclaimable"
    );
    assert!(!state.evict(), "nor evictable before it has been read");
    assert_eq!(state.due(&t, None).1, Action::Drop("header_timeout"));
    let accepted = state.phase().1;
    state.on_bytes(); // a first byte of a head
    state.on_drained(); // and nothing more yet
    assert_eq!(
        state.phase(),
        (Phase::Silent, accepted),
        "silent since the accept"
    );
    assert_eq!(state.due(&t, None).1, Action::Drop("header_timeout"));
    state.on_request();
    state.on_bytes(); // body bytes do not start a new head
    assert_eq!(state.phase().0, Phase::Request);
    state.on_answered();
    assert_eq!(state.phase().0, Phase::Idle);
    assert_eq!(state.due(&t, None).1, Action::Close("keepalive_timeout"));
    state.on_bytes();
    assert_eq!(state.phase().0, Phase::Head);
    state.on_request();
    state.on_answered();
    assert!(state.reclaim());
    assert_eq!(state.phase().0, Phase::Closing);
    state.on_bytes();
    assert_eq!(
        state.phase().0,
        Phase::Closing,
        "a reclaimed connection stays closing"
    );
}

#[tokio::test]
async fn only_silent_connections_are_evictable_and_eviction_sticks() {
    let state = ConnState::new(Clock::new(), Arc::default());
    state.on_drained();
    assert_eq!(state.phase().0, Phase::Silent);
    assert!(state.evict());
    assert_eq!(state.phase().0, Phase::Evicted);
    state.on_request(); // a head completing at the same moment
    assert_eq!(
        state.phase().0,
        Phase::Evicted,
        "an evicted connection is dropped"
    );
    assert!(!state.evict(), "evicted once");

    let used = ConnState::new(Clock::new(), Arc::default());
    used.on_request();
    used.on_answered();
    used.on_bytes(); // the next head begins...
    used.on_drained(); // ...slowly
    assert_eq!(used.phase().0, Phase::Head);
    assert!(
        !used.evict(),
        "a connection that completed a request is never evicted"
    );
}
