//! The client side: TLS connections to the server (ALPN http/1.1) and hand-written HTTP/1.1
//! requests and responses.

use std::fmt::Write as _;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;

use rustls::client::Resumption;
use rustls::{ClientConfig, RootCertStore};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, ServerName};
use serde_json::Value;
use tokio::io::{
    AsyncBufRead, AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader,
};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

/// A TLS client trusting `ca_pems`, offering ALPN `http/1.1`, without session resumption
/// (as the API server's Go client: every connection does a full handshake).
pub fn connector(ca_pems: &[&str]) -> TlsConnector {
    connector_with(ca_pems, None)
}

/// [`connector`] presenting the client certificate `cert_pem` with its key `key_pem`.
pub fn connector_as(ca_pems: &[&str], cert_pem: &str, key_pem: &str) -> TlsConnector {
    connector_with(ca_pems, Some((cert_pem, key_pem)))
}

fn connector_with(ca_pems: &[&str], client: Option<(&str, &str)>) -> TlsConnector {
    let mut roots = RootCertStore::empty();
    for pem in ca_pems {
        roots
            .add(CertificateDer::from_pem_slice(pem.as_bytes()).expect("CA PEM"))
            .expect("add CA");
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("protocol versions")
        .with_root_certificates(roots);
    let mut cfg = match client {
        None => builder.with_no_client_auth(),
        Some((cert, key)) => {
            let chain = CertificateDer::pem_slice_iter(cert.as_bytes())
                .collect::<Result<Vec<_>, _>>()
                .expect("client certificate PEM");
            let key = rustls_pki_types::PrivateKeyDer::from_pem_slice(key.as_bytes())
                .expect("client key PEM");
            builder
                .with_client_auth_cert(chain, key)
                .expect("client certificate and key")
        }
    };
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    cfg.resumption = Resumption::disabled();
    TlsConnector::from(Arc::new(cfg))
}

/// One HTTP response.
#[derive(Debug)]
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Response {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("response body is not JSON ({e}): {}", self.text()))
    }
}

pub(super) fn bad(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg)
}

pub(super) async fn read_line<R: AsyncBufRead + Unpin>(r: &mut R) -> io::Result<String> {
    let mut line = String::new();
    if r.read_line(&mut line).await? == 0 {
        return Err(io::ErrorKind::UnexpectedEof.into());
    }
    Ok(line.trim_end_matches(['\r', '\n']).to_owned())
}

/// Reads one response: status line, headers, then a `Content-Length`, chunked or
/// until-close body. EOF before the status line is `UnexpectedEof`.
pub async fn read_response<R: AsyncBufRead + Unpin>(r: &mut R) -> io::Result<Response> {
    let status_line = read_line(r).await?;
    let status = status_line
        .strip_prefix("HTTP/1.1 ")
        .and_then(|s| s.get(..3))
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| bad(format!("bad status line {status_line:?}")))?;
    let mut headers = Vec::new();
    loop {
        let line = read_line(r).await?;
        if line.is_empty() {
            break;
        }
        let (k, v) = line
            .split_once(':')
            .ok_or_else(|| bad(format!("bad header {line:?}")))?;
        headers.push((k.trim().to_owned(), v.trim().to_owned()));
    }
    let mut resp = Response {
        status,
        headers,
        body: Vec::new(),
    };
    if let Some(len) = resp.header("content-length") {
        let len: usize = len
            .parse()
            .map_err(|_| bad(format!("content-length {len}")))?;
        resp.body.resize(len, 0);
        r.read_exact(&mut resp.body).await?;
    } else if resp
        .header("transfer-encoding")
        .is_some_and(|v| v.eq_ignore_ascii_case("chunked"))
    {
        loop {
            let size = read_line(r).await?;
            let size = usize::from_str_radix(size.split(';').next().unwrap_or("").trim(), 16)
                .map_err(|_| bad(format!("chunk size {size:?}")))?;
            if size == 0 {
                while !read_line(r).await?.is_empty() {}
                break;
            }
            let start = resp.body.len();
            resp.body.resize(start + size, 0);
            r.read_exact(&mut resp.body[start..]).await?;
            read_line(r).await?;
        }
    } else {
        r.read_to_end(&mut resp.body).await?;
    }
    Ok(resp)
}

/// A POST with a `Content-Length` body; `close` asks the server to close afterwards.
pub fn post(path: &str, body: &[u8], close: bool) -> Vec<u8> {
    let mut out = head(
        "POST",
        path,
        &[
            ("Content-Type", "application/json"),
            ("Content-Length", &body.len().to_string()),
            ("Connection", if close { "close" } else { "keep-alive" }),
        ],
    );
    out.extend_from_slice(body);
    out
}

/// A request head (request line, Host, the given headers, blank line), no body.
pub fn head(method: &str, path: &str, headers: &[(&str, &str)]) -> Vec<u8> {
    let mut s = format!("{method} {path} HTTP/1.1\r\nHost: otel-injector.test\r\n");
    for (k, v) in headers {
        let _ = write!(s, "{k}: {v}\r\n");
    }
    s.push_str("\r\n");
    s.into_bytes()
}

/// One chunk of a chunked body.
pub fn chunk(data: &[u8]) -> Vec<u8> {
    let mut out = format!("{:x}\r\n", data.len()).into_bytes();
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
    out
}

/// A connection with buffered reads; writes go straight to the stream.
pub struct Conn<S> {
    io: BufReader<S>,
}

impl<S: AsyncRead + AsyncWrite + Unpin> Conn<S> {
    pub fn new(stream: S) -> Self {
        Conn {
            io: BufReader::new(stream),
        }
    }

    pub async fn send(&mut self, bytes: &[u8]) -> io::Result<()> {
        let w = self.io.get_mut();
        w.write_all(bytes).await?;
        w.flush().await
    }

    pub async fn response(&mut self) -> io::Result<Response> {
        read_response(&mut self.io).await
    }

    pub async fn roundtrip(&mut self, request: &[u8]) -> io::Result<Response> {
        self.send(request).await?;
        self.response().await
    }

    /// Reads whatever comes next: `Ok(0)` is an orderly close.
    pub async fn read_some(&mut self) -> io::Result<usize> {
        let mut buf = [0u8; 1024];
        self.io.read(&mut buf).await
    }

    /// Writes `parts` one after another while reading the response, and returns it as soon
    /// as it is complete (the server may answer, and close, before the body is all sent).
    pub async fn send_while_reading(self, parts: Vec<Vec<u8>>) -> io::Result<Response> {
        let (rd, mut wr) = tokio::io::split(self.io);
        let mut rd = BufReader::new(rd);
        let writer = async move {
            for p in parts {
                if wr.write_all(&p).await.is_err() || wr.flush().await.is_err() {
                    break;
                }
            }
            // Keep the write half open: dropping it would not close a split stream anyway.
            std::future::pending::<()>().await
        };
        tokio::select! {
            r = read_response(&mut rd) => r,
            _ = writer => unreachable!(),
        }
    }
}

impl Conn<TlsStream<TcpStream>> {
    /// The DER of the certificate the server presented.
    pub fn peer_cert(&self) -> Vec<u8> {
        let (_, tls) = self.io.get_ref().get_ref();
        tls.peer_certificates()
            .and_then(|c| c.first())
            .expect("server presented a certificate")
            .as_ref()
            .to_vec()
    }

    pub fn alpn(&self) -> Option<Vec<u8>> {
        let (_, tls) = self.io.get_ref().get_ref();
        tls.alpn_protocol().map(<[u8]>::to_vec)
    }
}

/// Opens a TLS connection to `addr` (server name 127.0.0.1).
pub async fn tls_connect(
    addr: SocketAddr,
    connector: &TlsConnector,
) -> io::Result<Conn<TlsStream<TcpStream>>> {
    let tcp = TcpStream::connect(addr).await?;
    tcp.set_nodelay(true)?;
    let name = ServerName::IpAddress(addr.ip().into());
    Ok(Conn::new(connector.connect(name, tcp).await?))
}

/// A plain-HTTP GET with `Connection: close` on a fresh connection.
pub async fn http_get(addr: SocketAddr, path: &str) -> io::Result<Response> {
    let tcp = TcpStream::connect(addr).await?;
    let mut c = Conn::new(tcp);
    c.roundtrip(&head("GET", path, &[("Connection", "close")]))
        .await
}
