//! A stand-in for a Kubernetes Service in front of webhook replicas: one address on
//! 127.0.0.1 whose new connections go, round robin, to the endpoints whose `/readyz`
//! answered 200 at their last probe, as kube-proxy sends new connections to ready endpoints
//! only. An established connection stays on its endpoint (bytes forwarded as they are, TLS
//! included) until one side closes it. With no ready endpoint a new connection is closed at
//! once (kube-proxy rejects it).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use super::webhook::http_get;

/// One replica behind the Service.
#[derive(Clone, Debug)]
struct Endpoint {
    name: String,
    addr: SocketAddr,
    admin: SocketAddr,
    ready: bool,
    /// Connections sent to it.
    routed: u64,
}

#[derive(Default)]
struct State {
    endpoints: Vec<Endpoint>,
    next: usize,
    /// Connections closed at once because no endpoint was ready.
    rejected: u64,
}

/// The running proxy. Dropping it stops accepting, probing and forwarding.
pub struct Service {
    pub addr: SocketAddr,
    state: Arc<Mutex<State>>,
    stop: watch::Sender<bool>,
}

impl Service {
    /// Listens on a free port of 127.0.0.1 and probes every endpoint's `/readyz` each
    /// `period` (as a readiness probe with `failureThreshold: 1` whose result reaches the
    /// proxy at once).
    pub async fn start(period: Duration) -> std::io::Result<Service> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let state = Arc::new(Mutex::new(State::default()));
        let (stop, stopped) = watch::channel(false);
        tokio::spawn(accept(listener, state.clone(), stopped.clone()));
        tokio::spawn(probe(period, state.clone(), stopped));
        Ok(Service { addr, state, stop })
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Adds an endpoint, not ready until its first probe says so.
    pub fn add(&self, name: &str, addr: SocketAddr, admin: SocketAddr) {
        self.state().endpoints.push(Endpoint {
            name: name.to_owned(),
            addr,
            admin,
            ready: false,
            routed: 0,
        });
    }

    /// Removes an endpoint (its pod is gone); its open connections are not touched.
    pub fn remove(&self, name: &str) {
        self.state().endpoints.retain(|e| e.name != name);
    }

    /// Whether `name` is ready at its last probe.
    pub fn is_ready(&self, name: &str) -> bool {
        self.state()
            .endpoints
            .iter()
            .any(|e| e.name == name && e.ready)
    }

    /// Waits until `name` is ready, at most `limit`.
    pub async fn wait_ready(&self, name: &str, limit: Duration) -> Result<(), String> {
        let t0 = std::time::Instant::now();
        while !self.is_ready(name) {
            if t0.elapsed() > limit {
                return Err(format!("endpoint {name} not ready within {limit:?}"));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(())
    }

    /// Connections routed to each endpoint still listed.
    pub fn routed(&self) -> BTreeMap<String, u64> {
        self.state()
            .endpoints
            .iter()
            .map(|e| (e.name.clone(), e.routed))
            .collect()
    }

    /// Connections closed at once because no endpoint was ready.
    pub fn rejected(&self) -> u64 {
        self.state().rejected
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
    }
}

/// The next ready endpoint, round robin.
fn pick(state: &Mutex<State>) -> Option<SocketAddr> {
    let mut s = state.lock().unwrap_or_else(|e| e.into_inner());
    let n = s.endpoints.len();
    for i in 0..n {
        let k = (s.next + i) % n;
        if s.endpoints[k].ready {
            s.next = k + 1;
            s.endpoints[k].routed += 1;
            return Some(s.endpoints[k].addr);
        }
    }
    s.rejected += 1;
    None
}

async fn accept(
    listener: TcpListener,
    state: Arc<Mutex<State>>,
    mut stopped: watch::Receiver<bool>,
) {
    loop {
        let (client, _) = tokio::select! {
            _ = stopped.changed() => return,
            a = listener.accept() => match a {
                Ok(a) => a,
                Err(_) => continue,
            },
        };
        let Some(to) = pick(&state) else {
            drop(client);
            continue;
        };
        let mut stopped = stopped.clone();
        tokio::spawn(async move {
            let mut client = client;
            let Ok(mut backend) = TcpStream::connect(to).await else {
                return;
            };
            let _ = client.set_nodelay(true);
            let _ = backend.set_nodelay(true);
            tokio::select! {
                _ = tokio::io::copy_bidirectional(&mut client, &mut backend) => {}
                _ = stopped.changed() => {}
            }
        });
    }
}

async fn probe(period: Duration, state: Arc<Mutex<State>>, mut stopped: watch::Receiver<bool>) {
    loop {
        let targets: Vec<(String, SocketAddr)> = {
            let s = state.lock().unwrap_or_else(|e| e.into_inner());
            s.endpoints
                .iter()
                .map(|e| (e.name.clone(), e.admin))
                .collect()
        };
        for (name, admin) in targets {
            let ready = matches!(
                tokio::time::timeout(Duration::from_secs(1), http_get(admin, "/readyz")).await,
                Ok(Ok((200, _)))
            );
            let mut s = state.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(e) = s.endpoints.iter_mut().find(|e| e.name == name) {
                e.ready = ready;
            }
        }
        tokio::select! {
            _ = stopped.changed() => return,
            () = tokio::time::sleep(period) => {}
        }
    }
}
