//! What the `auto` modes read of the API server, never per request: the version it behaves
//! as (its emulated version when it emulates an older release, else its own) and whether its
//! `ImageVolume` feature gate is on, from the `kubernetes_feature_enabled` gauge of its
//! `/metrics`. Reading `/metrics` needs `get` on the non-resource URL `/metrics`
//! (`manifests/components/agent-delivery-auto`); without it the gate is unknown and `auto` falls
//! back to the version rule (see [`crate::engine::auto_image_volumes`]).

use k8s_openapi::apimachinery::pkg::version::Info;
use kube::Client;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::engine::auto_image_volumes;
use crate::metrics::registered;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SourceLabels {
    source: &'static str,
}

/// What `auto` agent delivery decided, as a series.
#[derive(Debug)]
pub struct Metrics {
    image_volumes: Family<SourceLabels, Gauge>,
}

impl Metrics {
    /// The series, registered into `registry` (the `apiserver` prefix's).
    pub fn register(registry: &mut Registry) -> Self {
        Metrics {
            image_volumes: registered(
                registry,
                "image_volumes",
                "1 when `auto` agent delivery uses image volumes, 0 when init containers; \
                 source: feature_gate (read from the API server's /metrics) or version (the \
                 gate could not be read)",
            ),
        }
    }

    /// What `auto` agent delivery decides now, and from which signal (`feature_gate` or
    /// `version`); only that signal's series is kept.
    pub fn auto_delivery(&self, source: &'static str, image_volumes: bool) {
        self.image_volumes.clear();
        self.image_volumes
            .get_or_create(&SourceLabels { source })
            .set(i64::from(image_volumes));
    }
}

/// `(major, minor)` of a version as the API server reports it (`"1"`, `"37+"`).
pub fn parse_version(major: &str, minor: &str) -> Option<(u32, u32)> {
    let number = |s: &str| -> Option<u32> {
        let digits: String = s.chars().take_while(char::is_ascii_digit).collect();
        digits.parse().ok()
    };
    Some((number(major)?, number(minor)?))
}

/// The feature gate `auto` agent delivery follows.
pub const IMAGE_VOLUME_GATE: &str = "ImageVolume";

/// What the `auto` modes read of the API server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ServerInfo {
    /// `(major, minor)` the API server behaves as.
    pub version: (u32, u32),
    /// The `ImageVolume` feature gate; `None`: it could not be read.
    pub image_volume_gate: Option<bool>,
}

impl ServerInfo {
    /// The signal `auto` agent delivery follows (`feature_gate` or `version`), and what it
    /// decides (true: image volumes).
    pub fn auto_delivery(&self) -> (&'static str, bool) {
        let source = if self.image_volume_gate.is_some() {
            "feature_gate"
        } else {
            "version"
        };
        (
            source,
            auto_image_volumes(Some(self.version), self.image_volume_gate),
        )
    }
}

/// The version an API server behaves as: its emulation version when it reports one
/// (`--emulated-version`), else its binary version.
pub fn effective_version(info: &Info) -> Option<(u32, u32)> {
    let emulated = match (&info.emulation_major, &info.emulation_minor) {
        (Some(major), Some(minor)) => parse_version(major, minor),
        _ => None,
    };
    emulated.or_else(|| parse_version(&info.major, &info.minor))
}

/// The value of `kubernetes_feature_enabled{name="<feature>",...}` in a Prometheus text
/// exposition: `Some(true)` for 1, `Some(false)` for 0, `None` when the series is absent.
pub fn feature_enabled(exposition: &str, feature: &str) -> Option<bool> {
    let wanted = format!("name=\"{feature}\"");
    exposition.lines().find_map(|line| {
        let rest = line.strip_prefix("kubernetes_feature_enabled{")?;
        let (labels, value) = rest.split_once('}')?;
        if !labels.split(',').any(|l| l.trim() == wanted) {
            return None;
        }
        let value: f64 = value.split_whitespace().next()?.parse().ok()?;
        Some(value != 0.0)
    })
}

/// Why the gate could not be read (logged; `auto` then follows the version).
#[derive(Debug, thiserror::Error)]
pub enum GateError {
    #[error(
        "the API server refused GET /metrics (HTTP {0}): grant get on the non-resource URL \
         /metrics (manifests/components/agent-delivery-auto)"
    )]
    Forbidden(u16),
    #[error(
        "the API server's /metrics has no kubernetes_feature_enabled{{name=\"{IMAGE_VOLUME_GATE}\"}}"
    )]
    Missing,
    #[error("GET /metrics: {0}")]
    Request(#[from] kube::Error),
}

/// Reads the `ImageVolume` gate from the API server's `/metrics`.
pub async fn read_gate(client: &Client) -> Result<bool, GateError> {
    let request = axum::http::Request::get("/metrics")
        .body(Vec::new())
        .map_err(|e| GateError::Request(kube::Error::HttpError(e)))?;
    let text = client.request_text(request).await.map_err(|e| match e {
        kube::Error::Api(s) if s.code == 401 || s.code == 403 => GateError::Forbidden(s.code),
        e => GateError::Request(e),
    })?;
    feature_enabled(&text, IMAGE_VOLUME_GATE).ok_or(GateError::Missing)
}

/// Reads the version (an error is retried by the caller) and then the gate (one attempt:
/// an error leaves it unknown and is logged).
pub async fn read(client: &Client) -> anyhow::Result<ServerInfo> {
    let (info, gate_error) = read_explained(client).await?;
    if let Some(e) = gate_error {
        tracing::info!(
            error = %e,
            "the ImageVolume feature gate cannot be read; `auto` agent delivery follows the \
             API server version instead (image volumes from 1.36)"
        );
    }
    Ok(info)
}

/// [`read`], returning why the gate could not be read instead of logging it.
pub async fn read_explained(client: &Client) -> anyhow::Result<(ServerInfo, Option<GateError>)> {
    let info = client.apiserver_version().await?;
    let version = effective_version(&info).ok_or_else(|| {
        anyhow::anyhow!(
            "unreadable API server version {}.{}",
            info.major,
            info.minor
        )
    })?;
    let (image_volume_gate, error) = match read_gate(client).await {
        Ok(on) => (Some(on), None),
        Err(e) => (None, Some(e)),
    };
    let server = ServerInfo {
        version,
        image_volume_gate,
    };
    Ok((server, error))
}

/// Reads [`ServerInfo`], retrying with backoff until the version is known; logs it and sets
/// the `auto` delivery metric.
pub async fn read_until_known(client: &Client, metrics: &Metrics) -> ServerInfo {
    let notify = |e: &anyhow::Error, delay: std::time::Duration| {
        tracing::warn!(error = %e, ?delay, "cannot read the API server version; retrying");
    };
    let info = crate::retry::until_ok(|| read(client), notify).await;
    let (source, image_volumes) = info.auto_delivery();
    tracing::info!(
        major = info.version.0,
        minor = info.version.1,
        image_volume_gate = ?info.image_volume_gate,
        auto_delivery = if image_volumes { "image-volume" } else { "init-container" },
        decided_by = source,
        "API server"
    );
    metrics.auto_delivery(source, image_volumes);
    info
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXPOSITION: &str = "\
# HELP kubernetes_feature_enabled [BETA] This metric records the data about the stage and enablement of a k8s feature.
# TYPE kubernetes_feature_enabled gauge
kubernetes_feature_enabled{name=\"ImageMaximumGCAge\",stage=\"GA\"} 1
kubernetes_feature_enabled{name=\"ImageVolume\",stage=\"BETA\"} 0
kubernetes_feature_enabled{name=\"ImageVolumeWithDigest\",stage=\"ALPHA\"} 1
kubernetes_feature_enabled{stage=\"GA\",name=\"InPlacePodVerticalScaling\"} 1
";

    #[test]
    fn the_gate_is_read_from_its_own_series() {
        assert_eq!(feature_enabled(EXPOSITION, "ImageVolume"), Some(false));
        assert_eq!(
            feature_enabled(EXPOSITION, "ImageVolumeWithDigest"),
            Some(true)
        );
        assert_eq!(
            feature_enabled(EXPOSITION, "InPlacePodVerticalScaling"),
            Some(true)
        );
        assert_eq!(feature_enabled(EXPOSITION, "Image"), None);
        assert_eq!(feature_enabled("", "ImageVolume"), None);
        let on = "kubernetes_feature_enabled{name=\"ImageVolume\",stage=\"GA\"} 1\n";
        assert_eq!(feature_enabled(on, "ImageVolume"), Some(true));
        // Another metric with the same label is not the gauge.
        let other = "apiserver_something{name=\"ImageVolume\"} 1\n";
        assert_eq!(feature_enabled(other, "ImageVolume"), None);
    }

    fn info(major: &str, minor: &str, emulated: Option<(&str, &str)>) -> Info {
        Info {
            major: major.into(),
            minor: minor.into(),
            emulation_major: emulated.map(|e| e.0.into()),
            emulation_minor: emulated.map(|e| e.1.into()),
            ..Info::default()
        }
    }

    #[test]
    fn an_emulated_version_is_the_one_that_counts() {
        assert_eq!(effective_version(&info("1", "37", None)), Some((1, 37)));
        assert_eq!(
            effective_version(&info("1", "37", Some(("1", "35")))),
            Some((1, 35))
        );
        assert_eq!(effective_version(&info("1", "37+", None)), Some((1, 37)));
        assert_eq!(effective_version(&info("1", "x", None)), None);
    }

    #[test]
    fn the_metric_names_the_signal_auto_follows() {
        let s = |version, gate| {
            ServerInfo {
                version,
                image_volume_gate: gate,
            }
            .auto_delivery()
        };
        assert_eq!(s((1, 37), Some(true)), ("feature_gate", true));
        assert_eq!(s((1, 35), Some(false)), ("feature_gate", false));
        assert_eq!(s((1, 35), Some(true)), ("feature_gate", true));
        assert_eq!(s((1, 37), None), ("version", true));
        assert_eq!(s((1, 35), None), ("version", false));
    }
}
