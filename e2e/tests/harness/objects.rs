//! What a test does through its [`Env`]: namespaces, Instrumentations and pods created, dry-run
//! and read back, and the engine settings its webhook runs with.

use std::time::{Duration, Instant};

use clap::Parser as _;
use otel_injector::cli::{Cli, Command};
use otel_injector::engine::EngineConfig;
use serde_json::{Value, json};

use crate::support::api::{self, Response};
use crate::support::webhook::Requests;

use super::rbac::Variant;
use super::{Env, SCOPE_LABEL, pod};
use otel_injector::keys::{INJECT_JAVA, OPT_OUT_LABEL};

impl Env {
    /// The engine settings this test's webhook runs with: its flags read by the real
    /// command-line parser, turned into an [`EngineConfig`] by the same `EngineArgs::build`
    /// as `otel_injector::serve` uses.
    /// (The parser also reads `OTEL_INJECTOR_*` variables, which the webhook process does
    /// not get: keep them out of the test's environment.)
    pub fn engine_config(&self) -> EngineConfig {
        let argv = ["otel-injector", "serve"]
            .into_iter()
            .map(String::from)
            .chain(self.args.iter().cloned());
        let cli = Cli::try_parse_from(argv).unwrap_or_else(|e| panic!("serve flags: {e}"));
        let Command::Serve(a) = cli.command else {
            unreachable!("parsed as serve")
        };
        a.engine.build()
    }

    /// The namespace as stored (must exist).
    pub async fn stored_namespace(&self, ns: &str) -> Value {
        api::get_namespace(&self.client, ns)
            .await
            .unwrap_or_else(|e| panic!("{e}"))
            .unwrap_or_else(|| panic!("namespace {ns} is not stored"))
    }

    /// Polls the namespace (every 20 ms, at most 10 s) until the webhook's namespace label
    /// `otel-injector/inject=true` is `present` (or gone); returns how long that took.
    pub async fn await_namespace_label(&self, ns: &str, present: bool) -> Duration {
        let t0 = Instant::now();
        loop {
            let stored = self.stored_namespace(ns).await;
            if (stored["metadata"]["labels"][OPT_OUT_LABEL] == "true") == present {
                eprintln!(
                    "[e2e] {}: label {OPT_OUT_LABEL} {} on {ns} after {:?}",
                    self.id,
                    if present { "set" } else { "removed" },
                    t0.elapsed()
                );
                return t0.elapsed();
            }
            assert!(
                t0.elapsed() < Duration::from_secs(10),
                "the webhook did not {} the label {OPT_OUT_LABEL}=true on namespace {ns} \
                 within 10 s (started with {:?}); namespace metadata: {}",
                if present { "set" } else { "remove" },
                self.args,
                stored["metadata"]
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Sets (`Some`) or removes (`None`) one annotation of a namespace (merge patch).
    pub async fn annotate_namespace(&self, ns: &str, key: &str, value: Option<&str>) {
        let patch = json!({"metadata": {"annotations": {key: value}}});
        let r = api::merge_patch(&self.client, &format!("/api/v1/namespaces/{ns}"), &patch)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(r.status, 200, "patch namespace {ns}: {}", r.body);
    }

    /// Creates namespace `<id>-<suffix>` in this test's scope.
    pub async fn namespace(&self, suffix: &str, annotations: &[(&str, &str)]) -> String {
        self.namespace_labeled(suffix, &[], annotations).await
    }

    /// [`Env::namespace`] with further labels.
    pub async fn namespace_labeled(
        &self,
        suffix: &str,
        labels: &[(&str, &str)],
        annotations: &[(&str, &str)],
    ) -> String {
        let name = format!("{}-{suffix}", self.id);
        let mut all = vec![(SCOPE_LABEL, self.id.as_str())];
        all.extend_from_slice(labels);
        api::create_namespace(&self.client, &name, &all, annotations)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        name
    }

    /// Webhook configurations take effect asynchronously: creates (dry run) a marker pod
    /// with an `inject-java: "false"` annotation (sent by every configuration, answered at once)
    /// until the webhook's request counter moves.
    pub async fn await_webhook(&self, ns: &str) {
        let before = self.webhook.requests().await.total();
        let marker = pod("marker", &[(INJECT_JAVA, "false")]);
        let t0 = Instant::now();
        loop {
            let r = api::create_pod(&self.client, ns, &marker, true)
                .await
                .unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(r.status, 201, "marker pod: {}", r.body);
            if self.webhook.requests().await.total() > before {
                return;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(30),
                "the webhook configuration for {ns} did not take effect within 30 s"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Creates an Instrumentation (must succeed); returns the object as sent.
    pub async fn instrumentation(&self, ns: &str, name: &str, spec: Value) -> Value {
        let inst = json!({
            "apiVersion": "opentelemetry.io/v1alpha1", "kind": "Instrumentation",
            "metadata": {"name": name, "namespace": ns}, "spec": spec
        });
        let r = api::create_instrumentation(&self.client, ns, &inst)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            r.status, 201,
            "create Instrumentation {ns}/{name}: {}",
            r.body
        );
        inst
    }

    /// Creates a pod for real; it must be accepted.
    pub async fn create(&self, ns: &str, pod: &Value) -> Response {
        let r = api::create_pod(&self.client, ns, pod, false)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(r.status, 201, "create pod in {ns}: {}", r.body);
        r
    }

    /// Creates a pod with `dryRun=All`; it must be accepted.
    pub async fn dry_run(&self, ns: &str, pod: &Value) -> Response {
        let r = api::create_pod(&self.client, ns, pod, true)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(r.status, 201, "dry-run pod in {ns}: {}", r.body);
        r
    }

    /// The pod as stored (GET); it must exist.
    pub async fn stored(&self, ns: &str, name: &str) -> Value {
        api::get_pod(&self.client, ns, name)
            .await
            .unwrap_or_else(|e| panic!("{e}"))
            .unwrap_or_else(|| panic!("pod {ns}/{name} is not stored"))
    }

    /// The webhook's caches fill from watches: dry-runs `pod` until `ready` holds for the
    /// answer (bounded), so that the real case that follows sees a settled cache.
    pub async fn until_dry_run(
        &self,
        ns: &str,
        pod: &Value,
        what: &str,
        ready: impl Fn(&Response) -> bool,
    ) -> Response {
        let t0 = Instant::now();
        let calls_before = self.webhook.requests().await.total();
        loop {
            let r = self.dry_run(ns, pod).await;
            if ready(&r) {
                return r;
            }
            // The configuration is live for this namespace (`await_webhook`): a pod that is
            // not sent at all within a few seconds is filtered out by the configuration, and
            // waiting longer will not change that.
            let never_sent = t0.elapsed() > Duration::from_secs(3)
                && self.webhook.requests().await.total() == calls_before;
            if never_sent || t0.elapsed() > Duration::from_secs(20) {
                let calls = self.webhook.requests().await.total() - calls_before;
                let manifest_path = self.variant.manifest();
                let manifest = std::fs::read_to_string(&manifest_path);
                let mut hint = if manifest.is_ok_and(|m| m.contains("namespaceObject")) {
                    " The manifest's matchConditions use namespaceObject, which kube-apiserver \
                     leaves null in every matchCondition (of webhooks and admission policies \
                     alike), so a namespace's annotations cannot be seen there."
                        .to_owned()
                } else {
                    String::new()
                };
                if calls == 0.0 && self.variant == Variant::Targeted {
                    let labels = api::get_namespace(&self.client, ns)
                        .await
                        .ok()
                        .flatten()
                        .map(|n| n["metadata"]["labels"].clone());
                    hint.push_str(&format!(
                        " In the targeted variant a pod without inject-* annotations is sent \
                         only for a namespace labeled {OPT_OUT_LABEL}=true (by the webhook's \
                         labeler, which this test's webhook runs: {}); the namespace's labels: \
                         {labels:?}.",
                        self.args.contains(&"--label-namespaces=true".to_owned())
                    ));
                }
                panic!(
                    "{what}: not seen within {:?} in namespace {ns}; the webhook was called \
                     {calls} times for these dry-runs (0 means the apiserver never sent the \
                     pod: check the namespaceSelector and matchConditions of {}). Last \
                     answer: warnings {:?}, annotations {}, init containers {}.{hint}",
                    t0.elapsed(),
                    manifest_path.display(),
                    r.warnings,
                    r.body["metadata"]["annotations"],
                    r.body["spec"]["initContainers"],
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub async fn requests(&self) -> Requests {
        self.webhook.requests().await
    }
}
