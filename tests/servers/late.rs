//! A pod that asks for an Instrumentation the cache does not hold yet
//! (`--instrumentation-wait`, `server/late.rs`), in-process on a paused clock: the review
//! waits for the cache's change notification and answers with the injection (whether the
//! pod asks by annotation, by label or by its namespace); with no change
//! it answers with the skip when the wait, or the caller's deadline, ends; a change that does
//! not bring the Instrumentation keeps it waiting.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use otel_injector::cluster::StaticCatalog;
use otel_injector::engine::{Catalog, Instrumentations, NamespaceInfo};
use otel_injector::keys::INJECT_JAVA;
use otel_injector::metrics::Exposition;
use otel_injector::server::InstrumentationWait;
use serde_json::Value;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::support::router::{call, post, webhook_over};
use crate::support::{INSTRUMENTATIONS, fixture, metric, review_of};

/// The test Instrumentations, replaced whole as a watch would, with its notification; the
/// namespace `late` with `namespace_keys` as its annotations.
struct Changing {
    now: RwLock<Arc<StaticCatalog>>,
    changes: watch::Sender<u64>,
    namespace_keys: Vec<(&'static str, &'static str)>,
}

impl Changing {
    fn new(namespace_keys: &[(&'static str, &'static str)]) -> Arc<Self> {
        let namespace_keys = namespace_keys.to_vec();
        Arc::new(Changing {
            now: RwLock::new(Arc::new(catalog("", &namespace_keys))),
            changes: watch::channel(0).0,
            namespace_keys,
        })
    }

    fn replace(&self, extra: &str) {
        *self.now.write().unwrap() = Arc::new(catalog(extra, &self.namespace_keys));
        self.changes.send_modify(|n| *n += 1);
    }

    fn current(&self) -> Arc<StaticCatalog> {
        self.now.read().unwrap().clone()
    }
}

fn catalog(extra: &str, namespace_keys: &[(&str, &str)]) -> StaticCatalog {
    StaticCatalog::from_yaml(&format!("{INSTRUMENTATIONS}{extra}"))
        .unwrap()
        .with_namespace("late", namespace_keys)
}

impl Catalog for Changing {
    fn ready(&self) -> bool {
        self.current().ready()
    }
    fn instrumentations(&self) -> Arc<Instrumentations> {
        self.current().instrumentations()
    }
    fn namespace(&self, name: &str) -> Option<Arc<NamespaceInfo>> {
        self.current().namespace(name)
    }
}

/// An Instrumentation in the namespace `late`, named `name`.
fn in_late(name: &str) -> String {
    format!(
        "---\napiVersion: opentelemetry.io/v1alpha1\nkind: Instrumentation\n\
         metadata: {{name: {name}, namespace: late}}\n\
         spec: {{exporter: {{endpoint: http://collector.late.svc:4318}}}}\n"
    )
}

/// How a pod asks for Java: by its annotation or its label with this value, or not at all
/// (its namespace asks).
#[derive(Clone, Copy, Debug)]
enum Asks {
    Annotation(&'static str),
    Label(&'static str),
    ByNamespace,
}

/// The fixture's Java pod, created in `late`, asking as `asks` says.
fn pod_in_late(asks: Asks) -> Vec<u8> {
    let mut review = fixture("pod-create-inject-java.json");
    review["request"]["namespace"] = "late".into();
    let meta = &mut review["request"]["object"]["metadata"];
    meta["namespace"] = "late".into();
    meta["annotations"]
        .as_object_mut()
        .unwrap()
        .remove(INJECT_JAVA);
    match asks {
        Asks::Annotation(value) => meta["annotations"][INJECT_JAVA] = value.into(),
        Asks::Label(value) => meta["labels"][INJECT_JAVA] = value.into(),
        Asks::ByNamespace => {}
    }
    serde_json::to_vec(&review).unwrap()
}

fn waits(metrics: &Exposition, outcome: &str) -> f64 {
    let series = format!("otel_injector_instrumentation_waits_total{{outcome=\"{outcome}\"}}");
    metric(&metrics.encode(), &series).expect("series exists")
}

/// The outcome annotation the answer's patch writes.
fn outcome_of(patch: &Option<Value>) -> String {
    patch
        .as_ref()
        .and_then(|p| p.as_array())
        .into_iter()
        .flatten()
        .find(|op| op["path"] == "/metadata/annotations/otel-injector~1status")
        .map(|op| op["value"].as_str().unwrap().to_owned())
        .unwrap_or_default()
}

fn wait_of(catalog: &Arc<Changing>, longest: Duration) -> Option<InstrumentationWait> {
    InstrumentationWait::new(catalog.changes.subscribe(), longest)
}

#[tokio::test(start_paused = true)]
async fn a_pod_waits_for_the_instrumentation_applied_with_it_and_is_injected() {
    let _serial = crate::support::serial().await;
    // (how the pod asks, its namespace's keys, the Instrumentation that comes, the outcome's
    // head): every form of request waits alike.
    let table = [
        (
            Asks::Annotation("true"),
            &[][..],
            "default",
            "java=injected late/default",
        ),
        (
            Asks::Annotation("named"),
            &[],
            "named",
            "java=injected late/named",
        ),
        (
            Asks::Label("named"),
            &[],
            "named",
            "java=injected late/named",
        ),
        (
            Asks::ByNamespace,
            &[(INJECT_JAVA, "true")],
            "default",
            "java=injected late/default",
        ),
    ];
    for (asks, namespace_keys, name, outcome) in table {
        let value = format!("{asks:?}");
        let changing = Changing::new(namespace_keys);
        let (router, metrics) =
            webhook_over(changing.clone(), wait_of(&changing, Duration::from_secs(2)));
        let comes = {
            let (changing, extra) = (changing.clone(), in_late(name));
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(300)).await;
                // A change elsewhere first: the review reviews again and keeps waiting.
                changing.replace(&in_late("unrelated").replace("late", "elsewhere"));
                tokio::time::sleep(Duration::from_millis(200)).await;
                changing.replace(&extra);
            })
        };
        let start = Instant::now();
        let r = review_of(&call(router, post(crate::support::MUTATE, pod_in_late(asks))).await);
        assert_eq!(start.elapsed(), Duration::from_millis(500), "{value}");
        comes.await.unwrap();
        let got = outcome_of(&r.patch);
        assert!(got.starts_with(&format!("{outcome} ")), "{value}: {got}");
        assert!(r.warnings.is_empty(), "{value}: {:?}", r.warnings);
        assert_eq!(waits(&metrics, "found"), 1.0, "{value}");
        assert_eq!(waits(&metrics, "expired"), 0.0, "{value}");
    }
}

#[tokio::test(start_paused = true)]
async fn with_no_instrumentation_coming_the_skip_answers_when_the_wait_or_deadline_ends() {
    let _serial = crate::support::serial().await;
    // (uri, the wait configured, how long the answer took): the deadline's budget is the
    // timeout less a fifth (at most 500 ms), kept to write the answer.
    let table = [
        ("/mutate-v1-pod?timeout=10s", 2_000, 2_000),
        ("/mutate-v1-pod?timeout=1s", 2_000, 800),
        ("/mutate-v1-pod?timeout=10s", 0, 0),
    ];
    for (uri, wait, took) in table {
        let changing = Changing::new(&[]);
        let longest = Duration::from_millis(wait);
        let (router, metrics) = webhook_over(changing.clone(), wait_of(&changing, longest));
        let start = Instant::now();
        let r = review_of(&call(router, post(uri, pod_in_late(Asks::Annotation("true")))).await);
        assert_eq!(start.elapsed(), Duration::from_millis(took), "{uri} {wait}");
        assert_eq!(
            outcome_of(&r.patch),
            "java=skipped no_instrumentation late/*",
            "{uri} {wait}"
        );
        assert_eq!(r.warnings.len(), 1, "{:?}", r.warnings);
        let expired = if wait == 0 { 0.0 } else { 1.0 };
        assert_eq!(waits(&metrics, "expired"), expired, "{uri} {wait}");
        assert_eq!(waits(&metrics, "found"), 0.0);
    }
}

#[tokio::test(start_paused = true)]
async fn a_pod_that_finds_its_instrumentation_or_asks_for_nothing_never_waits() {
    let _serial = crate::support::serial().await;
    for name in ["pod-create-inject-java.json", "pod-create.json"] {
        let changing = Changing::new(&[]);
        let (router, metrics) =
            webhook_over(changing.clone(), wait_of(&changing, Duration::from_secs(2)));
        let body = serde_json::to_vec(&fixture(name)).unwrap();
        let start = Instant::now();
        call(router, post(crate::support::MUTATE, body)).await;
        assert_eq!(start.elapsed(), Duration::ZERO, "{name}");
        assert_eq!(waits(&metrics, "found") + waits(&metrics, "expired"), 0.0);
    }
}
