//! A stand-in for the cluster network between the API server and Services, as a konnectivity
//! server is one: kube-apiserver's egress selector (`--egress-selector-config-file`, egress
//! `cluster`, `HTTPConnect` over a Unix socket: 1.37's TCP transport without TLS crashes at
//! start) sends every connection to a Service-backed webhook through this proxy as
//! `CONNECT <clusterIP>:<port>`. The proxy forwards it to the address
//! [`Egress::route`] set for that Service address (a pod the test runs on this machine), and
//! answers `503` for any other, so the API server sees an unreachable Service, as it would
//! with no ready endpoint.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpStream, UnixListener, UnixStream};

type Routes = Arc<Mutex<BTreeMap<String, SocketAddr>>>;

/// The running proxy; dropping it stops accepting.
pub struct Egress {
    pub socket: PathBuf,
    routes: Routes,
    task: tokio::task::JoinHandle<()>,
}

impl Egress {
    /// Listens on the Unix socket `socket`.
    pub async fn start(socket: &Path) -> std::io::Result<Egress> {
        let listener = UnixListener::bind(socket)?;
        let routes = Routes::default();
        let table = routes.clone();
        let task = tokio::spawn(async move {
            while let Ok((conn, _)) = listener.accept().await {
                tokio::spawn(forward(conn, table.clone()));
            }
        });
        Ok(Egress {
            socket: socket.to_owned(),
            routes,
            task,
        })
    }

    /// Writes the API server's egress selector configuration for this proxy into `path`.
    pub fn write_config(&self, path: &Path) -> std::io::Result<()> {
        std::fs::write(
            path,
            format!(
                "apiVersion: apiserver.k8s.io/v1beta1\nkind: EgressSelectorConfiguration\n\
                 egressSelections:\n- name: cluster\n  connection:\n    proxyProtocol: \
                 HTTPConnect\n    transport:\n      uds:\n        udsName: {}\n",
                self.socket.display()
            ),
        )
    }

    /// Connections to `service` (`clusterIP:port`) go to `to` from now on; `None` removes
    /// the route.
    pub fn route(&self, service: &str, to: Option<SocketAddr>) {
        let mut routes = self.routes.lock().unwrap_or_else(|e| e.into_inner());
        match to {
            Some(to) => routes.insert(service.to_owned(), to),
            None => routes.remove(service),
        };
    }
}

impl Drop for Egress {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn forward(mut conn: UnixStream, routes: Routes) {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if head.len() > 8192 || !matches!(conn.read(&mut byte).await, Ok(1)) {
            return;
        }
        head.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&head);
    let target = head
        .lines()
        .next()
        .and_then(|l| l.strip_prefix("CONNECT "))
        .and_then(|l| l.split_whitespace().next())
        .unwrap_or_default()
        .to_owned();
    let to = routes
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get(&target)
        .copied();
    let upstream = match to {
        Some(to) => TcpStream::connect(to).await.ok(),
        None => None,
    };
    let Some(mut upstream) = upstream else {
        let _ = conn
            .write_all(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n")
            .await;
        return;
    };
    if conn
        .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
        .await
        .is_err()
    {
        return;
    }
    let _ = tokio::io::copy_bidirectional(&mut conn, &mut upstream).await;
}
