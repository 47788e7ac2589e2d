//! Tests of `conns`.

use std::time::Duration;

use super::wrappers::Answered;
use super::*;
use crate::server::shutdown::{self, Shutdown};
use tokio::sync::mpsc;

/// A drain that begins when the sender sends (and closes a minute later).
fn drain() -> (mpsc::UnboundedSender<()>, Shutdown, Drain) {
    shutdown::manual(Duration::from_secs(60), Duration::ZERO)
}

fn tracker_with(limits: ConnLimits) -> (mpsc::UnboundedSender<()>, Shutdown, Arc<Tracker>) {
    let (tx, shutdown, drain) = drain();
    let t = Tracker::new(
        "test",
        limits,
        Arc::new(Metrics::register(&mut crate::metrics::root())),
        drain,
    );
    (tx, shutdown, t)
}

fn tracker() -> Arc<Tracker> {
    let (_, _, drain) = drain();
    Tracker::new(
        "test",
        ConnLimits {
            max_connections: 4,
            ..ConnLimits::default()
        },
        Arc::new(Metrics::register(&mut crate::metrics::root())),
        drain,
    )
}

#[test]
fn connections_retire_at_their_age_spread_over_a_fifth() {
    let age = Duration::from_secs(60);
    let ages: Vec<Duration> = (0..16).map(|id| retire_age(age, id).unwrap()).collect();
    assert_eq!(ages[0], age);
    assert_eq!(ages[7], Duration::from_millis(49_500));
    assert_eq!(ages[8], age);
    assert!(ages.iter().all(|a| *a > age * 4 / 5 && *a <= age));
    assert_eq!(
        ages[..8]
            .iter()
            .collect::<std::collections::BTreeSet<_>>()
            .len(),
        8
    );
    assert_eq!(retire_age(Duration::ZERO, 3), None);
}

#[tokio::test]
async fn an_old_connection_retires_and_a_young_one_does_not() {
    let (_signal, _shutdown, t) = tracker_with(ConnLimits {
        max_age: Duration::from_millis(200),
        ..ConnLimits::default()
    });
    let c = t.register(Phase::Fresh);
    assert_eq!(c.retiring(), None);
    tokio::time::sleep(Duration::from_millis(210)).await;
    assert_eq!(c.retiring(), Some(ConnRetire::MaxAge));
    let young = t.register(Phase::Fresh);
    assert_eq!(young.retiring(), None);
    // Without a maximum age, never.
    let (_signal, _shutdown, t) = tracker_with(ConnLimits {
        max_age: Duration::ZERO,
        ..ConnLimits::default()
    });
    let c = t.register(Phase::Fresh);
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(c.retiring(), None);
}

#[tokio::test]
async fn once_draining_every_answer_retires_and_no_idle_connection_is_closed_early() {
    let (signal, shutdown, t) = tracker_with(ConnLimits::default());
    let run = tokio::spawn(shutdown.signaled(std::future::pending::<()>()));
    // The connection's work as the listener's: it ends when its client closes it.
    let serve = |c: &Conn| {
        let (closed_tx, closed_rx) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(c.clone().run(async move {
            let _ = closed_rx.await;
        }));
        (closed_tx, task)
    };
    let idle = t.register(Phase::Fresh);
    idle.set(Phase::Request);
    idle.set(Phase::Idle);
    let (idle_client, idle_task) = serve(&idle);
    let busy = t.register(Phase::Fresh);
    busy.set(Phase::Request);
    let (busy_client, busy_task) = serve(&busy);
    assert_eq!(busy.retiring(), None);

    signal.send(()).unwrap();
    while !t.drain.is_draining() {
        tokio::task::yield_now().await;
    }
    // Every answer from now on is its connection's last…
    assert_eq!(idle.retiring(), Some(ConnRetire::Draining));
    assert_eq!(busy.retiring(), Some(ConnRetire::Draining));
    // …but the drain shortens no deadline: an idle connection waits its idle timeout
    // (above the API server's), so the client closes it, or uses it and is answered.
    for (c, phase, limit) in [
        (&idle, Phase::Idle, DEFAULT_IDLE_TIMEOUT),
        (&busy, Phase::Request, REQUEST_TIMEOUT),
    ] {
        let (p, deadline) = c.deadline().unwrap();
        assert_eq!(p, phase);
        assert!(deadline - Instant::now() > limit - Duration::from_secs(1));
    }
    let handshaking = t.register(Phase::Handshake);
    let (phase, deadline) = handshaking.deadline().unwrap();
    assert_eq!(phase, Phase::Handshake);
    assert!(deadline - Instant::now() > Duration::from_secs(9));
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!idle_task.is_finished() && !busy_task.is_finished());

    // The busy one's answer retires it (the wrapper marks it); the idle one's client
    // closes it. Only the latter counts as closed by its client.
    busy.0.retired.store(true, Ordering::Release);
    drop(busy_client);
    assert_eq!(busy_task.await.unwrap(), None);
    drop(idle_client);
    assert_eq!(idle_task.await.unwrap(), None);
    let counts = t.drain_counts();
    assert_eq!((counts.client_closed, counts.open), (1, 1));

    // The listener's wait ends when the last connection has gone.
    let all = tokio::spawn({
        let t = t.clone();
        async move { t.all_closed().await }
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(!all.is_finished());
    drop(Registration(handshaking));
    tokio::time::timeout(Duration::from_secs(5), all)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(t.drain_counts().open, 0);
    run.abort();
}

#[tokio::test]
async fn the_oldest_connection_without_a_request_gives_way_first() {
    let t = tracker();
    let idle = t.register(Phase::Fresh);
    idle.set(Phase::Request);
    idle.set(Phase::Idle);
    let busy = t.register(Phase::Fresh);
    busy.set(Phase::Request);
    let silent = t.register(Phase::Fresh);
    let handshaking = t.register(Phase::Handshake);
    let slow_head = t.register(Phase::Fresh);
    // Not a candidate until its task has started.
    let unstarted = t.register(Phase::Fresh);
    for c in [&silent, &handshaking] {
        c.started();
    }
    slow_head.bytes_read();
    assert_eq!(slow_head.phase(), Phase::Head);
    // A later idle connection comes after the older fresh ones but before none.
    let order: Vec<u64> = t.registry().queue.values().copied().collect();
    let ids = |c: &[&Conn]| c.iter().map(|c| c.0.id).collect::<Vec<_>>();
    assert_eq!(order, ids(&[&silent, &handshaking, &slow_head, &idle]));

    for want in [&silent, &handshaking, &slow_head, &idle] {
        assert!(t.shed_oldest());
        assert!(want.0.shed.load(Ordering::Acquire), "{:?}", want.phase());
    }
    assert!(!busy.0.shed.load(Ordering::Acquire));
    assert!(!t.shed_oldest(), "a request in progress never gives way");
    unstarted.started();
    assert!(t.shed_oldest());
    assert!(unstarted.0.shed.load(Ordering::Acquire));
    // A shed connection is not queued again by a later phase change.
    silent.set(Phase::Idle);
    assert!(!t.shed_oldest());
}

#[tokio::test]
async fn deadlines_follow_the_phase_and_trickled_bytes_do_not_move_them() {
    let t = tracker();
    let c = t.register(Phase::Fresh);
    let (p, fresh) = c.deadline().unwrap();
    assert_eq!(p, Phase::Fresh);
    c.bytes_read();
    let (p, head) = c.deadline().unwrap();
    assert_eq!(p, Phase::Head);
    assert!(head < fresh);
    c.bytes_read();
    assert_eq!(c.deadline().unwrap(), (Phase::Head, head));
    c.set(Phase::Request);
    // The answer counts as given only once it is flushed after the body is handed over.
    c.flushed();
    assert_eq!(c.phase(), Phase::Request);
    drop(Answered(c.clone()));
    assert_eq!(c.phase(), Phase::Request);
    c.flushed();
    assert_eq!(c.phase(), Phase::Idle);
    let (p, idle) = c.deadline().unwrap();
    assert_eq!(p, Phase::Idle);
    assert!(idle - head >= Duration::from_secs(115));
}

#[tokio::test]
async fn at_the_cap_a_new_connection_is_admitted_at_once_unless_all_are_in_requests() {
    let t = tracker();
    let conns: Vec<Conn> = (0..4).map(|_| t.register(Phase::Fresh)).collect();
    let tasks: Vec<_> = conns
        .iter()
        .map(|c| tokio::spawn(c.clone().run(std::future::pending())))
        .collect();
    // Full: the oldest is chosen, and the new one need not wait for it to close.
    t.admit().await;
    assert!(conns[0].0.shed.load(Ordering::Acquire));
    assert_eq!(t.registry().shedding, 1);
    let fifth = t.register(Phase::Fresh);
    let fifth_task = tokio::spawn(fifth.clone().run(std::future::pending()));
    let mut tasks = tasks.into_iter();
    let first = tasks.next().unwrap().await.unwrap();
    assert_eq!(first, Some(ConnClose::Shed));
    assert_eq!((t.open(), t.registry().shedding), (4, 0));
    // All in requests: the next one waits until one of them leaves.
    for c in conns.iter().skip(1).chain([&fifth]) {
        c.set(Phase::Request);
    }
    let admit = tokio::spawn({
        let t = t.clone();
        async move { t.admit().await }
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(!admit.is_finished());
    fifth_task.abort();
    let _ = fifth_task.await;
    tokio::time::timeout(Duration::from_secs(5), admit)
        .await
        .expect("admitted once a connection left")
        .unwrap();
    assert_eq!(t.open(), 3);
    // …or until one of them becomes idle, which may then give way.
    let sixth = t.register(Phase::Request);
    let admit = tokio::spawn({
        let t = t.clone();
        async move { t.admit().await }
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(!admit.is_finished());
    conns[1].set(Phase::Idle);
    tokio::time::timeout(Duration::from_secs(5), admit)
        .await
        .expect("admitted once a connection became idle")
        .unwrap();
    assert!(conns[1].0.shed.load(Ordering::Acquire));
    assert!(!sixth.0.shed.load(Ordering::Acquire));
    for t in tasks {
        t.abort();
    }
}

#[tokio::test]
async fn a_phase_that_outlives_its_deadline_closes_the_connection() {
    let (_signal, _shutdown, t) = tracker_with(ConnLimits {
        header: Duration::from_millis(200),
        idle: Duration::from_millis(600),
        ..ConnLimits::default()
    });
    // Idle for 300 ms (within the idle timeout), then a head that never completes:
    // closed 200 ms after its first byte, earlier than the idle deadline it replaced.
    let c = t.register(Phase::Fresh);
    let task = tokio::spawn(c.clone().run(std::future::pending()));
    tokio::time::sleep(Duration::from_millis(300)).await;
    let first_byte = Instant::now();
    c.bytes_read();
    let closed = task.await.unwrap();
    let took = first_byte.elapsed();
    assert_eq!(closed, Some(ConnClose::HeaderTimeout));
    assert!(
        (Duration::from_millis(200)..Duration::from_millis(290)).contains(&took),
        "{took:?}"
    );
    assert_eq!(t.open(), 0);
    // A silent one is closed at the idle timeout.
    let c = t.register(Phase::Fresh);
    let started = Instant::now();
    let closed = c.run(std::future::pending()).await;
    assert_eq!(closed, Some(ConnClose::IdleTimeout));
    assert!(started.elapsed() >= Duration::from_millis(600));
}
