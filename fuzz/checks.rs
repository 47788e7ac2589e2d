//! What every fuzz input must satisfy, shared by the fuzz targets (`fuzz/fuzz_targets/`) and
//! the corpus replay in the test suite (`tests/engine/fuzz_corpus.rs`): no panic; a readable review
//! gets a valid AdmissionReview answer with its uid; the patch applies with a strict RFC 6902
//! applier and leaves a pod that passes [`valid::check`] (when the input pod did).

use arbitrary::{Arbitrary, Unstructured};
use base64::Engine as _;
use k8s_openapi::api::core::v1::Pod;
use otel_injector::admission;
use otel_injector::agents::LanguageSet;
use otel_injector::cluster::StaticCatalog;
use otel_injector::engine::{EngineConfig, Snapshot};
use otel_injector::pod::valid;
use otel_injector::warnings::MAX_WARNING_LEN;
use serde_json::{Value, json};

/// Instrumentations that exercise every language and option: the only one in `shop`, two
/// in `multi`, exporter TLS, Java extensions, web-server settings.
const INSTRUMENTATIONS: &str = r#"
apiVersion: opentelemetry.io/v1alpha1
kind: Instrumentation
metadata: {name: inst, namespace: shop}
spec:
  exporter:
    endpoint: http://collector:4317
    tls: {secretName: otel-tls, configMapName: otel-ca, ca_file: ca.crt, cert_file: tls.crt, key_file: tls.key}
  propagators: [tracecontext, b3]
  sampler: {type: parentbased_traceidratio, argument: "0.5"}
  env: [{name: OTEL_LOGS_EXPORTER, value: otlp}]
  resource: {addK8sUIDAttributes: true, resourceAttributes: {team: a}}
  java: {extensions: [{image: "ext:1", dir: /ext}, {image: "ext:2", dir: /ext2}]}
  go: {env: [{name: OTEL_GO_AUTO_TARGET_EXE, value: /app}]}
  apacheHttpd: {version: "2.2", attrs: [{name: ApacheModuleOtelMaxQueueSize, value: "4096"}]}
  nginx: {configFile: /etc/nginx/nginx.conf}
---
apiVersion: opentelemetry.io/v1alpha1
kind: Instrumentation
metadata: {name: a, namespace: multi}
spec: {}
---
apiVersion: opentelemetry.io/v1alpha1
kind: Instrumentation
metadata: {name: b, namespace: multi}
spec: {defaults: {useLabelsForResourceAttributes: true}}
"#;

/// The webhook under test: every language enabled, exporter TLS objects tracked.
pub struct Webhook {
    catalog: StaticCatalog,
    config: EngineConfig,
}

impl Default for Webhook {
    fn default() -> Self {
        let catalog = StaticCatalog::from_yaml(INSTRUMENTATIONS)
            .expect("fuzz Instrumentations parse")
            .with_namespace(
                "shop",
                &[("instrumentation.opentelemetry.io/inject-sdk", "false")],
            )
            .with_objects(&[
                (
                    otel_injector::engine::ObjectKind::Secret,
                    "shop",
                    "otel-tls",
                ),
                (
                    otel_injector::engine::ObjectKind::ConfigMap,
                    "shop",
                    "otel-ca",
                ),
            ]);
        let config = EngineConfig {
            enabled: LanguageSet::all(),
            ..EngineConfig::default()
        };
        Webhook { catalog, config }
    }
}

impl Webhook {
    /// Reviews `data` and checks the answer. Panics on any broken promise.
    pub fn check_review(&self, data: &[u8]) {
        let answer = admission::review(data, &self.catalog, &self.config);
        // The one-pass read of the envelope answers as the plain read does.
        let plain = admission::review_two_pass(data, &self.catalog, &self.config);
        match (&answer, &plain) {
            (Ok((body, _)), Ok((plain, _))) => assert_eq!(
                String::from_utf8_lossy(body),
                String::from_utf8_lossy(plain),
                "the one-pass read answers differently"
            ),
            (Err(e), Err(p)) => assert_eq!(e.to_string(), p.to_string()),
            _ => panic!("the one-pass read and the plain read disagree on readability"),
        }
        let Ok((body, summary)) = answer else {
            // Not a readable review: answered with an error status, nothing to check.
            return;
        };
        let out: Value = serde_json::from_slice(&body).expect("the answer is JSON");
        // The envelope is read with the object kept raw, so a review whose object holds
        // text a full parse rejects (a lone surrogate escape) is still answered; then there
        // is nothing to apply a patch to.
        let Ok(review) = serde_json::from_slice::<Value>(data) else {
            assert_eq!(out["response"]["uid"].as_str(), Some(summary.uid.as_str()));
            assert_eq!(out["response"]["allowed"], true);
            return;
        };
        self.check_partial_decode(&review);
        assert_eq!(out["apiVersion"], "admission.k8s.io/v1");
        assert_eq!(out["kind"], "AdmissionReview");
        let response = &out["response"];
        assert_eq!(response["uid"], review["request"]["uid"], "uid echoed");
        assert_eq!(response["uid"].as_str(), Some(summary.uid.as_str()));
        assert_eq!(response["allowed"], true);
        for w in response["warnings"].as_array().into_iter().flatten() {
            let w = w.as_str().expect("warnings are strings");
            assert!(w.chars().count() <= MAX_WARNING_LEN, "long warning {w:?}");
            assert!(!w.contains(['\n', '\r']), "multi-line warning {w:?}");
        }
        let Some(patch) = response["patch"].as_str() else {
            assert!(response.get("patchType").is_none());
            return;
        };
        assert_eq!(response["patchType"], "JSONPatch");
        let ops = base64::engine::general_purpose::STANDARD
            .decode(patch)
            .expect("the patch is base64");
        let ops: json_patch::Patch = serde_json::from_slice(&ops).expect("the patch is JSON Patch");
        let mut object = review["request"]["object"].clone();
        let was_valid = typed(&object).is_some_and(|p| valid::check(&p).is_ok());
        json_patch::patch(&mut object, &ops)
            .unwrap_or_else(|e| panic!("the patch does not apply strictly: {e}"));
        if was_valid {
            let pod = typed(&object).expect("the patched pod decodes");
            valid::check(&pod).unwrap_or_else(|e| panic!("the patched pod is invalid: {e}"));
        }
    }

    /// The webhook decodes only the fields of a pod that the engine reads
    /// ([`admission::decode_pod`]): deciding on that must give the patch and the report
    /// that deciding on the whole typed pod gives.
    fn check_partial_decode(&self, review: &Value) {
        let object = &review["request"]["object"];
        let (Some(whole), Ok(partial)) =
            (typed(object), admission::decode_pod(&object.to_string()))
        else {
            return;
        };
        let namespace = review["request"]["namespace"].as_str().unwrap_or_default();
        let snapshot = || Snapshot::take(&self.catalog, namespace, &self.config);
        let (whole_patch, whole_report) = admission::mutate_json(&snapshot(), &whole);
        let (patch, report) = admission::mutate_json(&snapshot(), &partial);
        let utf8 =
            |p: Option<Vec<u8>>| p.map(|p| String::from_utf8(p).expect("the patch is UTF-8"));
        assert_eq!(
            utf8(patch),
            utf8(whole_patch),
            "the partial decode patches differently"
        );
        assert_eq!(report.status(), whole_report.status());
        assert_eq!(report.warnings, whole_report.warnings);
    }

    /// Builds a review from structured input and checks it.
    pub fn check_pod(&self, data: &[u8]) {
        let Ok(pod) = FuzzPod::arbitrary_take_rest(Unstructured::new(data)) else {
            return;
        };
        self.check_review(pod.review_text().as_bytes());
    }
}

/// The pod as typed, whatever `apiVersion`/`kind` it claims (the webhook does not read them).
fn typed(object: &Value) -> Option<Pod> {
    let mut object = object.clone();
    if let Some(o) = object.as_object_mut() {
        o.remove("apiVersion");
        o.remove("kind");
    }
    serde_json::from_value(object).ok()
}

/// Names that matter to injection: the user's usual names, the ones injection adds (to
/// provoke collisions), and odd ones.
#[derive(Arbitrary, Debug, Clone, Copy)]
enum Name {
    App,
    Sidecar,
    Web,
    Init,
    JavaInit,
    JavaExtension,
    NodeVolume,
    GoSidecar,
    Clone,
    NginxAttach,
    TlsSecret,
    Empty,
    Spaced,
}

impl Name {
    fn as_str(self) -> &'static str {
        match self {
            Name::App => "app",
            Name::Sidecar => "sidecar",
            Name::Web => "web",
            Name::Init => "init",
            Name::JavaInit => "opentelemetry-auto-instrumentation-java",
            Name::JavaExtension => "opentelemetry-auto-instrumentation-extension-0",
            Name::NodeVolume => "opentelemetry-auto-instrumentation-nodejs",
            Name::GoSidecar => "opentelemetry-auto-instrumentation",
            Name::Clone => "otel-agent-source-container-clone",
            Name::NginxAttach => "otel-agent-attach-nginx",
            Name::TlsSecret => "otel-auto-secret-otel-tls",
            Name::Empty => "",
            Name::Spaced => " app ",
        }
    }
}

/// Variables agents extend or read, and a free one.
#[derive(Arbitrary, Debug, Clone, Copy)]
enum Var {
    JavaToolOptions,
    NodeOptions,
    PythonPath,
    LdLibraryPath,
    ResourceAttributes,
    ServiceName,
    DotnetHome,
    StartupHooks,
    Sampler,
    Other,
}

impl Var {
    fn as_str(self) -> &'static str {
        match self {
            Var::JavaToolOptions => "JAVA_TOOL_OPTIONS",
            Var::NodeOptions => "NODE_OPTIONS",
            Var::PythonPath => "PYTHONPATH",
            Var::LdLibraryPath => "LD_LIBRARY_PATH",
            Var::ResourceAttributes => "OTEL_RESOURCE_ATTRIBUTES",
            Var::ServiceName => "OTEL_SERVICE_NAME",
            Var::DotnetHome => "OTEL_DOTNET_AUTO_HOME",
            Var::StartupHooks => "DOTNET_STARTUP_HOOKS",
            Var::Sampler => "OTEL_TRACES_SAMPLER",
            Var::Other => "PORT",
        }
    }
}

/// An env entry: a literal (maybe empty, maybe without `value`) or a `valueFrom`.
#[derive(Arbitrary, Debug)]
enum EnvValue {
    Absent,
    Literal(String),
    FieldRef,
}

#[derive(Arbitrary, Debug)]
struct FuzzContainer {
    name: Name,
    image: Option<String>,
    env: Vec<(Var, EnvValue)>,
    mounts: Vec<(Name, MountPath)>,
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum MountPath {
    JavaAgent,
    Python,
    NginxConf,
    ApacheConf,
    Data,
}

impl MountPath {
    fn as_str(self) -> &'static str {
        match self {
            MountPath::JavaAgent => "/otel-auto-instrumentation-java-app",
            MountPath::Python => "/otel-auto-instrumentation-python",
            MountPath::NginxConf => "/etc/nginx",
            MountPath::ApacheConf => "/usr/local/apache2/conf",
            MountPath::Data => "/data",
        }
    }
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum Lang {
    Java,
    NodeJs,
    Python,
    DotNet,
    Go,
    ApacheHttpd,
    Nginx,
    Sdk,
}

impl Lang {
    fn as_str(self) -> &'static str {
        match self {
            Lang::Java => "java",
            Lang::NodeJs => "nodejs",
            Lang::Python => "python",
            Lang::DotNet => "dotnet",
            Lang::Go => "go",
            Lang::ApacheHttpd => "apache-httpd",
            Lang::Nginx => "nginx",
            Lang::Sdk => "sdk",
        }
    }
}

/// What an `inject-*` annotation says.
#[derive(Arbitrary, Debug)]
enum Request {
    True,
    False,
    Named,
    Qualified,
    Missing,
    Free(String),
}

#[derive(Arbitrary, Debug)]
enum Annotation {
    Inject(Lang, Request),
    ContainerNames(Vec<Name>),
    LanguageContainerNames(Lang, Vec<Name>),
    Resource(String, String),
    PythonPlatform(String),
    DotnetRuntime(String),
    GoTarget(String),
    Injected,
    Mirror,
}

/// A pod in the shape of one the API server sends, built from fuzz bytes.
#[derive(Arbitrary, Debug)]
pub struct FuzzPod {
    namespace_shop: bool,
    annotations: Vec<Annotation>,
    labels: Vec<(String, String)>,
    init_containers: Vec<FuzzContainer>,
    containers: Vec<FuzzContainer>,
    volumes: Vec<Name>,
    share_process_namespace: Option<bool>,
    owner: Option<(u8, String)>,
}

fn container(c: &FuzzContainer) -> Value {
    let env: Vec<Value> = c
        .env
        .iter()
        .map(|(var, value)| match value {
            EnvValue::Absent => json!({"name": var.as_str()}),
            EnvValue::Literal(v) => json!({"name": var.as_str(), "value": v}),
            EnvValue::FieldRef => {
                json!({"name": var.as_str(), "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}})
            }
        })
        .collect();
    let mounts: Vec<Value> = c
        .mounts
        .iter()
        .map(|(v, p)| json!({"name": v.as_str(), "mountPath": p.as_str()}))
        .collect();
    let mut out = json!({"name": c.name.as_str(), "env": env, "volumeMounts": mounts});
    if let Some(image) = &c.image {
        out["image"] = json!(image);
    }
    out
}

impl FuzzPod {
    /// The AdmissionReview the API server would send for this pod's CREATE.
    /// [`FuzzPod::review`] as the API server writes it: the request's fields in its order
    /// (`kind`, `namespace` and `operation` before `object`), `oldObject` and `dryRun` after.
    pub fn review_text(&self) -> String {
        let review = self.review();
        let r = &review["request"];
        format!(
            r#"{{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{{"uid":{},"kind":{},"resource":{},"namespace":{},"operation":"CREATE","object":{},"oldObject":null,"dryRun":false}}}}"#,
            r["uid"], r["kind"], r["resource"], r["namespace"], r["object"]
        )
    }

    pub fn review(&self) -> Value {
        let mut annotations = serde_json::Map::new();
        let prefix = "instrumentation.opentelemetry.io/";
        let names = |n: &[Name]| n.iter().map(|n| n.as_str()).collect::<Vec<_>>().join(",");
        for a in &self.annotations {
            let (k, v) = match a {
                Annotation::Inject(l, r) => (
                    format!("{prefix}inject-{}", l.as_str()),
                    match r {
                        Request::True => "true".to_owned(),
                        Request::False => "false".to_owned(),
                        Request::Named => "inst".to_owned(),
                        Request::Qualified => "shop/inst".to_owned(),
                        Request::Missing => "nowhere/none".to_owned(),
                        Request::Free(s) => s.clone(),
                    },
                ),
                Annotation::ContainerNames(n) => (format!("{prefix}container-names"), names(n)),
                Annotation::LanguageContainerNames(l, n) => {
                    (format!("{prefix}{}-container-names", l.as_str()), names(n))
                }
                Annotation::Resource(k, v) => (format!("resource.opentelemetry.io/{k}"), v.clone()),
                Annotation::PythonPlatform(v) => {
                    (format!("{prefix}otel-python-platform"), v.clone())
                }
                Annotation::DotnetRuntime(v) => {
                    (format!("{prefix}otel-dotnet-auto-runtime"), v.clone())
                }
                Annotation::GoTarget(v) => (format!("{prefix}otel-go-auto-target-exe"), v.clone()),
                Annotation::Injected => ("otel-injector/injected".to_owned(), "java".to_owned()),
                Annotation::Mirror => ("kubernetes.io/config.mirror".to_owned(), "x".to_owned()),
            };
            annotations.insert(k, Value::String(v));
        }
        let labels: serde_json::Map<String, Value> = self
            .labels
            .iter()
            .map(|(k, v)| (k.clone(), Value::String(v.clone())))
            .collect();
        let mut spec = json!({
            "containers": self.containers.iter().map(container).collect::<Vec<_>>(),
            "initContainers": self.init_containers.iter().map(container).collect::<Vec<_>>(),
            "volumes": self.volumes.iter().map(|v| json!({"name": v.as_str(), "emptyDir": {}})).collect::<Vec<_>>(),
        });
        if let Some(share) = self.share_process_namespace {
            spec["shareProcessNamespace"] = json!(share);
        }
        let mut metadata =
            json!({"generateName": "p-", "annotations": annotations, "labels": labels});
        if let Some((kind, name)) = &self.owner {
            let kind = [
                "ReplicaSet",
                "StatefulSet",
                "DaemonSet",
                "Job",
                "CronJob",
                "Deployment",
            ][usize::from(*kind) % 6];
            metadata["ownerReferences"] = json!([{"apiVersion": "apps/v1", "kind": kind,
                "name": name, "uid": "u-1", "controller": true}]);
        }
        let namespace = if self.namespace_shop { "shop" } else { "multi" };
        json!({
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": "fuzz-uid",
                "kind": {"group": "", "version": "v1", "kind": "Pod"},
                "resource": {"group": "", "version": "v1", "resource": "pods"},
                "namespace": namespace,
                "operation": "CREATE",
                "object": {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec},
            }
        })
    }
}

/// A ConversionReview (`/convert`): never a panic; always a ConversionReview answer with the
/// request's uid (when it had one), `Success` with one converted object per object, each in
/// the version asked for and converting back to what was sent (the round trip, for objects
/// whose carrying annotations are the conversion's own), or `Failure` with a message.
pub fn check_conversion(data: &[u8]) {
    use otel_injector::crd::convert::{Version, convert};
    use otel_injector::crd::review;

    let converted = review::review(data);
    let answer: Value = serde_json::from_slice(&converted.body).expect("the answer is JSON");
    assert_eq!(answer["apiVersion"], "apiextensions.k8s.io/v1");
    assert_eq!(answer["kind"], "ConversionReview");
    let response = &answer["response"];
    assert_eq!(response["uid"], converted.uid.as_str());
    let request: Option<Value> = serde_json::from_slice::<Value>(data)
        .ok()
        .map(|v| v["request"].clone());
    match response["result"]["status"].as_str() {
        Some("Success") => {
            let request = request.expect("a readable review");
            let sent = request["objects"].as_array().cloned().unwrap_or_default();
            let got = response["convertedObjects"].as_array().unwrap();
            assert_eq!(sent.len(), got.len());
            let desired = request["desiredAPIVersion"].as_str().unwrap();
            for (before, after) in sent.iter().zip(got) {
                assert_eq!(after["apiVersion"], desired);
                let from = before["apiVersion"].as_str().and_then(Version::of).unwrap();
                let carried = |v: &Value, key: &str| {
                    v.pointer(&format!("/metadata/annotations/{}", key.replace('/', "~1")))
                        .is_some()
                };
                // Objects that already carry the other direction's annotation are not ones
                // the conversion wrote: only checked for not panicking.
                let foreign = carried(before, "otel-injector/v1beta1-fields")
                    && carried(before, "instrumentation.opentelemetry.io/v1alpha1-fields");
                if !foreign && before["spec"].is_object() {
                    let back = convert(after, from).expect("converts back");
                    let again = convert(&back, Version::of(desired).unwrap()).unwrap();
                    assert_eq!(&again, after, "the round trip is stable");
                }
            }
        }
        Some("Failure") => {
            assert!(
                response["result"]["message"]
                    .as_str()
                    .is_some_and(|m| !m.is_empty())
            );
            assert_eq!(response["convertedObjects"], json!([]));
        }
        other => panic!("result status {other:?}"),
    }
}
