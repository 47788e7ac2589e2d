//! The admission path in-process: `admission::review()` for three pod sizes against a
//! baseline that every webhook pays at least, parsing the same bytes into a
//! `serde_json::Value`. Run with `just bench` (`cargo bench --bench admission`); at the end
//! the medians of this invocation are printed as ratios to the baseline of their size.
//!
//! Paths per size: `baseline_parse` (the baseline), `pod_inject_java` (Pod CREATE that gets a
//! Java patch), `pod_inject_java_two_pass` (the same with the envelope read first and the pod
//! decoded from it afterwards, `admission::review_two_pass`: what the one-pass envelope
//! saves), `pod_noop` (a Pod CREATE asking for nothing) and `non_pod` (a Deployment CREATE:
//! the envelope is read, the object never decoded). Group `<size>_parts` times the
//! pieces of the inject path alone, to show where it goes. Group `bases`: the medium inject
//! path with 1,000 Instrumentations standing on a shared base against today's one
//! Instrumentation, the same with 1,000 selectors of other namespaces, a pod that asks for
//! nothing injected by a selector among them, and the resolution of the bases (off the
//! request path).

use std::hint::black_box;
use std::time::{Duration, SystemTime};

use criterion::{Criterion, Throughput};

#[path = "support/medians.rs"]
mod medians;
use k8s_openapi::api::core::v1::Pod;
use medians::{criterion_home, median_ns};
use otel_injector::admission;
use otel_injector::cluster::StaticCatalog;
use otel_injector::engine::{Catalog as _, EngineConfig, Snapshot, decide};
use serde_json::{Value, json};

const INSTRUMENTATION: &str = include_str!("../tests/data/instrumentations/java-load.yaml");

/// The group of the shared-base paths.
const BASES: &str = "bases";

/// `ns/java`, standing on `platform/java` (the benchmark's Instrumentation, moved there).
fn based(ns: &str) -> String {
    format!(
        "---\napiVersion: opentelemetry.io/v1alpha1\nkind: Instrumentation\nmetadata:\n  name: java\n  namespace: {ns}\n  annotations: {{otel-injector/base: platform/java}}\nspec:\n  exporter: {{endpoint: \"http://collector.{ns}:4318\"}}\n  resource: {{resourceAttributes: {{team: {ns}}}}}\n"
    )
}

/// The medium Java review, decided with today's catalog (one Instrumentation) and with
/// 1,000 namespaces' Instrumentations standing on one base (the pod's among them); and what
/// the bases cost off the request path: the index of the 1,000 built, and one base change
/// (its 1,000 dependents resolved again).
fn bases(c: &mut Criterion, config: &EngineConfig) {
    let (_, containers, env) = SIZES[1];
    let inject = review(containers, env, true, false);
    let today = StaticCatalog::from_yaml(INSTRUMENTATION).expect("Instrumentation YAML");
    let platform = INSTRUMENTATION.replace("namespace: shop", "namespace: platform");
    let mut yaml = platform.clone();
    yaml.push_str(&based("shop"));
    for i in 1..1000 {
        yaml.push_str(&based(&format!("team-{i:04}")));
    }
    let objects = otel_injector::crd::parse_instrumentations(&yaml).expect("YAML");
    let with_bases = StaticCatalog::new(objects.clone());
    let (_, s) = admission::review(&inject, &with_bases, config).expect("review");
    assert_eq!(s.report.injected.len(), 1, "{:?}", s.report);
    let index = with_bases.instrumentations();
    assert_eq!(index.readable_len(), 1001);
    assert!(
        index
            .based("team-0999", "java")
            .is_some_and(|b| b.error.is_none())
    );
    let changed = otel_injector::crd::parse_instrumentations(&platform.replace("2.30.0", "2.31.0"))
        .expect("YAML")
        .remove(0);

    let (selecting, selected) = selectors();
    let noop = review(containers, env, false, false);
    let (_, s) = admission::review(&inject, &selecting, config).expect("review");
    assert_eq!(s.report.injected.len(), 1, "{:?}", s.report);
    let (_, s) = admission::review(&noop, &selected, config).expect("review");
    assert_eq!(s.report.injected.len(), 1, "selected: {:?}", s.report);

    let mut g = c.benchmark_group(BASES);
    g.bench_function("today_one_instrumentation", |b| {
        b.iter(|| admission::review(black_box(&inject), &today, config).unwrap())
    });
    g.bench_function("with_1000_bases", |b| {
        b.iter(|| admission::review(black_box(&inject), &with_bases, config).unwrap())
    });
    g.bench_function("with_1000_selectors", |b| {
        b.iter(|| admission::review(black_box(&inject), &selecting, config).unwrap())
    });
    g.bench_function("selected_among_1000", |b| {
        b.iter(|| admission::review(black_box(&noop), &selected, config).unwrap())
    });
    g.bench_function("index_1000_based", |b| {
        b.iter(|| {
            objects
                .iter()
                .cloned()
                .collect::<otel_injector::engine::Instrumentations>()
        })
    });
    g.bench_function("base_change_1000_dependents", |b| {
        b.iter_batched(
            || otel_injector::engine::Instrumentations::clone(&index),
            |mut next| {
                next.insert(changed.clone());
                next
            },
            criterion::BatchSize::LargeInput,
        )
    });
    g.finish();
}

/// `ns/name` annotated with `selector`.
fn selecting(ns: &str, name: &str, selector: &str) -> String {
    format!(
        "---\napiVersion: opentelemetry.io/v1alpha1\nkind: Instrumentation\nmetadata:\n  name: {name}\n  namespace: {ns}\n  annotations:\n    otel-injector/selector: '{selector}'\nspec:\n  exporter: {{endpoint: \"http://collector.{ns}:4318\"}}\n"
    )
}

/// Two catalogs of 1,000 selectors in other namespaces (half at home, half selecting
/// namespaces by a label `shop` does not carry) besides `shop`'s Instrumentation: plain
/// (the annotated pod names it), then itself a selector of the pod's labels (the pod that
/// asks for nothing is injected by it).
fn selectors() -> (StaticCatalog, StaticCatalog) {
    let mut others = Vec::new();
    for i in 0..1000 {
        let ns = format!("team-{i:04}");
        let selector = if i % 2 == 0 {
            r#"{"languages": ["java"], "podSelector": {"matchLabels": {"tier": "backend"}}}"#
                .to_owned()
        } else {
            format!(
                r#"{{"languages": ["java"], "namespaceSelector": {{"matchLabels": {{"team": "{ns}"}}}}}}"#
            )
        };
        others.push(selecting(&ns, "java", &selector));
    }
    let labels = [("env", "prod"), ("team", "shop")];
    let plain = INSTRUMENTATION.to_owned() + &others.concat();
    let own = r#"{"languages": ["java"], "podSelector": {"matchLabels": {"app.kubernetes.io/name": "checkout"}}}"#;
    let by_selector = selecting("shop", "java", own) + &others.concat();
    let parse = |yaml: &str| {
        let items: Vec<_> = yaml
            .split("---\n")
            .filter(|d| !d.trim().is_empty())
            .flat_map(|d| otel_injector::crd::parse_instrumentations(d).expect("YAML"))
            .collect();
        StaticCatalog::new(items).with_namespace_labels("shop", &labels)
    };
    (parse(&plain), parse(&by_selector))
}

/// (name, containers, env entries per container)
const SIZES: [(&str, usize, usize); 3] = [("small", 1, 2), ("medium", 3, 20), ("large", 10, 50)];
const PATHS: [&str; 5] = [
    "baseline_parse",
    "pod_inject_java",
    "pod_inject_java_two_pass",
    "pod_noop",
    "non_pod",
];
/// Parts of the inject path, measured alone (group `<size>_parts`).
const PARTS: [&str; 4] = [
    "decode_pod",
    "decode_pod_no_managed_fields",
    "decide",
    "decide_and_patch",
];

fn container(i: usize, env: usize) -> Value {
    let name = if i == 0 {
        "app".to_owned()
    } else {
        format!("sidecar-{i}")
    };
    let env: Vec<Value> = (0..env)
        .map(|j| match j % 4 {
            3 => json!({"name": format!("POD_FIELD_{j}"), "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}}}),
            _ => json!({"name": format!("SETTING_{j}"), "value": format!("value-{j}-of-{name}")}),
        })
        .collect();
    json!({
        "name": name,
        "image": format!("registry.example.com/shop/{name}:1.4.{i}"),
        "ports": [{"name": "http", "containerPort": 8080 + i, "protocol": "TCP"}],
        "env": env,
        "resources": {"limits": {"memory": "768Mi"}, "requests": {"cpu": "250m", "memory": "512Mi"}},
        "volumeMounts": [{"name": "kube-api-access-x7k2p", "readOnly": true, "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}],
        "livenessProbe": {"httpGet": {"path": "/healthz", "port": 8080 + i, "scheme": "HTTP"}, "timeoutSeconds": 1, "periodSeconds": 10, "successThreshold": 1, "failureThreshold": 3},
        "readinessProbe": {"httpGet": {"path": "/ready", "port": 8080 + i, "scheme": "HTTP"}, "timeoutSeconds": 1, "periodSeconds": 10, "successThreshold": 1, "failureThreshold": 3},
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "File",
        "imagePullPolicy": "IfNotPresent",
        "securityContext": {"runAsNonRoot": true, "allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}}
    })
}

/// `managedFields` as the API server records them: one `f:` entry per annotation the creator
/// set, and one `k:` entry per container and env var, as in real pods.
fn managed_fields(containers: &[Value], annotations: &Value) -> Value {
    let mut cs = serde_json::Map::new();
    for c in containers {
        let mut env = serde_json::Map::new();
        env.insert(".".into(), json!({}));
        for e in c["env"].as_array().into_iter().flatten() {
            let key = format!("k:{{\"name\":\"{}\"}}", e["name"].as_str().unwrap());
            let value = if e.get("valueFrom").is_some() {
                json!({".": {}, "f:name": {}, "f:valueFrom": {".": {}, "f:fieldRef": {}}})
            } else {
                json!({".": {}, "f:name": {}, "f:value": {}})
            };
            env.insert(key, value);
        }
        let port = &c["ports"][0]["containerPort"];
        cs.insert(
            format!("k:{{\"name\":\"{}\"}}", c["name"].as_str().unwrap()),
            json!({
                ".": {}, "f:env": env, "f:image": {}, "f:imagePullPolicy": {},
                "f:livenessProbe": {".": {}, "f:failureThreshold": {}, "f:httpGet": {".": {}, "f:path": {}, "f:port": {}, "f:scheme": {}}, "f:periodSeconds": {}, "f:successThreshold": {}, "f:timeoutSeconds": {}},
                "f:name": {},
                "f:ports": {".": {}, format!("k:{{\"containerPort\":{port},\"protocol\":\"TCP\"}}"): {".": {}, "f:containerPort": {}, "f:name": {}, "f:protocol": {}}},
                "f:readinessProbe": {".": {}, "f:failureThreshold": {}, "f:httpGet": {".": {}, "f:path": {}, "f:port": {}, "f:scheme": {}}, "f:periodSeconds": {}, "f:successThreshold": {}, "f:timeoutSeconds": {}},
                "f:resources": {".": {}, "f:limits": {".": {}, "f:memory": {}}, "f:requests": {".": {}, "f:cpu": {}, "f:memory": {}}},
                "f:securityContext": {".": {}, "f:allowPrivilegeEscalation": {}, "f:capabilities": {".": {}, "f:drop": {}}, "f:runAsNonRoot": {}},
                "f:terminationMessagePath": {}, "f:terminationMessagePolicy": {}
            }),
        );
    }
    let mut annotation_fields = json!({".": {}});
    for key in annotations
        .as_object()
        .into_iter()
        .flatten()
        .map(|(k, _)| k)
    {
        annotation_fields[format!("f:{key}")] = json!({});
    }
    json!([{
        "manager": "kube-controller-manager",
        "operation": "Update",
        "apiVersion": "v1",
        "time": "2025-11-30T08:02:11Z",
        "fieldsType": "FieldsV1",
        "fieldsV1": {
            "f:metadata": {
                "f:annotations": annotation_fields,
                "f:generateName": {},
                "f:labels": {".": {}, "f:app.kubernetes.io/name": {}, "f:pod-template-hash": {}},
                "f:ownerReferences": {".": {}, "k:{\"uid\":\"c2a5e7d1-8f4b-4e3a-b6d9-1a0f2e3c4b5d\"}": {}}
            },
            "f:spec": {
                "f:containers": cs,
                "f:dnsPolicy": {}, "f:enableServiceLinks": {}, "f:restartPolicy": {},
                "f:schedulerName": {}, "f:securityContext": {}, "f:terminationGracePeriodSeconds": {}
            }
        }
    }])
}

/// An AdmissionReview CREATE of a pod (or, `deployment`, of a Deployment whose template is
/// that pod) with `containers` containers of `env` variables each.
fn review(containers: usize, env: usize, inject: bool, deployment: bool) -> Vec<u8> {
    let cs: Vec<Value> = (0..containers).map(|i| container(i, env)).collect();
    let mut annotations = json!({"kubectl.kubernetes.io/restartedAt": "2025-11-28T09:14:02Z"});
    if inject {
        annotations["instrumentation.opentelemetry.io/inject-java"] = json!("true");
    }
    let labels = json!({"app.kubernetes.io/name": "checkout", "pod-template-hash": "7d9f8b6c5d"});
    let spec = json!({
        "volumes": [{"name": "kube-api-access-x7k2p", "projected": {"sources": [
            {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
            {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
            {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}}
        ], "defaultMode": 420}}],
        "containers": cs,
        "restartPolicy": "Always",
        "terminationGracePeriodSeconds": 30,
        "dnsPolicy": "ClusterFirst",
        "serviceAccountName": "default",
        "securityContext": {},
        "schedulerName": "default-scheduler",
        "tolerations": [
            {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
            {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}
        ],
        "priority": 0,
        "enableServiceLinks": true,
        "preemptionPolicy": "PreemptLowerPriority"
    });
    let managed = managed_fields(spec["containers"].as_array().unwrap(), &annotations);
    let (gvk, resource, object) = if deployment {
        (
            json!({"group": "apps", "version": "v1", "kind": "Deployment"}),
            json!({"group": "apps", "version": "v1", "resource": "deployments"}),
            json!({
                "kind": "Deployment", "apiVersion": "apps/v1",
                "metadata": {"name": "checkout", "namespace": "shop", "labels": labels, "managedFields": managed},
                "spec": {
                    "replicas": 2,
                    "selector": {"matchLabels": {"app.kubernetes.io/name": "checkout"}},
                    "template": {"metadata": {"labels": labels, "annotations": annotations}, "spec": spec}
                }
            }),
        )
    } else {
        (
            json!({"group": "", "version": "v1", "kind": "Pod"}),
            json!({"group": "", "version": "v1", "resource": "pods"}),
            json!({
                "kind": "Pod", "apiVersion": "v1",
                "metadata": {
                    "generateName": "checkout-7d9f8b6c5d-", "namespace": "shop",
                    "creationTimestamp": null, "labels": labels, "annotations": annotations,
                    "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "checkout-7d9f8b6c5d",
                        "uid": "c2a5e7d1-8f4b-4e3a-b6d9-1a0f2e3c4b5d", "controller": true, "blockOwnerDeletion": true}],
                    "managedFields": managed
                },
                "spec": spec,
                "status": {"phase": "Pending", "qosClass": "Burstable"}
            }),
        )
    };
    serde_json::to_vec(&json!({
        "kind": "AdmissionReview",
        "apiVersion": "admission.k8s.io/v1",
        "request": {
            "uid": "0f3c8a2e-4b71-4d7e-9a51-6c2d9e8b1f04",
            "kind": gvk, "resource": resource, "requestKind": gvk, "requestResource": resource,
            "namespace": "shop",
            "operation": "CREATE",
            "userInfo": {"username": "system:serviceaccount:kube-system:replicaset-controller",
                "groups": ["system:serviceaccounts", "system:serviceaccounts:kube-system", "system:authenticated"]},
            "object": object,
            "oldObject": null,
            "dryRun": false,
            "options": {"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1"}
        }
    }))
    .unwrap()
}

fn main() {
    let started = SystemTime::now();
    let catalog = StaticCatalog::from_yaml(INSTRUMENTATION).expect("Instrumentation YAML");
    let config = EngineConfig::default();
    let mut c = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .configure_from_args();

    for (size, containers, env) in SIZES {
        let inject = review(containers, env, true, false);
        let noop = review(containers, env, false, false);
        let non_pod = review(containers, env, true, true);

        // The paths must be the ones they are named after, or the figures mean nothing.
        let (out, s) = admission::review(&inject, &catalog, &config).expect("inject review");
        assert!(
            s.patched,
            "{size}: no patch: {}",
            String::from_utf8_lossy(&out)
        );
        assert_eq!(s.report.injected.len(), 1, "{size}: {:?}", s.report);
        assert!(s.report.warnings.is_empty(), "{size}: {:?}", s.report);
        let (_, s) = admission::review(&noop, &catalog, &config).expect("noop review");
        assert!(!s.patched && !s.report.requested, "{size}: {:?}", s.report);
        let (_, s) = admission::review(&non_pod, &catalog, &config).expect("non-pod review");
        assert!(
            !s.patched && s.kind == "Deployment",
            "{size}: {:?}",
            s.report
        );
        eprintln!(
            "{size}: {containers} container(s) x {env} env; review bytes: inject {} noop {} non_pod {}; response bytes (inject) {}",
            inject.len(),
            noop.len(),
            non_pod.len(),
            out.len()
        );

        let mut g = c.benchmark_group(size);
        g.throughput(Throughput::Bytes(inject.len() as u64));
        g.bench_function(PATHS[0], |b| {
            b.iter(|| serde_json::from_slice::<Value>(black_box(&inject)).unwrap())
        });
        for (path, body) in [(PATHS[1], &inject), (PATHS[3], &noop), (PATHS[4], &non_pod)] {
            g.bench_function(path, |b| {
                b.iter(|| admission::review(black_box(body), &catalog, &config).unwrap())
            });
        }
        g.bench_function(PATHS[2], |b| {
            b.iter(|| admission::review_two_pass(black_box(&inject), &catalog, &config).unwrap())
        });
        g.finish();

        // Where review() spends its time on the inject path: the typed Pod decode (with and
        // without the managedFields no decision reads), decide(), and decide() with the
        // patch written as JSON text.
        let object = serde_json::from_slice::<Value>(&inject).unwrap()["request"]["object"].take();
        let mut trimmed = object.clone();
        trimmed["metadata"]["managedFields"].take();
        let (object, trimmed) = (object.to_string(), trimmed.to_string());
        let pod: Pod = serde_json::from_str(&object).unwrap();
        let mut g = c.benchmark_group(format!("{size}_parts"));
        g.bench_function(PARTS[0], |b| {
            b.iter(|| serde_json::from_str::<Pod>(black_box(&object)).unwrap())
        });
        g.bench_function(PARTS[1], |b| {
            b.iter(|| serde_json::from_str::<Pod>(black_box(&trimmed)).unwrap())
        });
        g.bench_function(PARTS[2], |b| {
            b.iter(|| decide(&Snapshot::take(&catalog, "shop", &config), black_box(&pod)))
        });
        g.bench_function(PARTS[3], |b| {
            b.iter(|| {
                admission::mutate_json(&Snapshot::take(&catalog, "shop", &config), black_box(&pod))
            })
        });
        g.finish();
    }
    bases(&mut c, &config);
    c.final_summary();

    // Ratios of this invocation's medians to the baseline of the same size.
    let Some(home) = criterion_home() else { return };
    let mut lines = Vec::new();
    for (size, ..) in SIZES {
        let Some(base) = median_ns(&home, size, PATHS[0], started) else {
            continue;
        };
        let parts = PARTS.iter().map(|p| (format!("{size}_parts"), *p));
        for (group, path) in PATHS.iter().map(|p| (size.to_owned(), *p)).chain(parts) {
            if let Some(m) = median_ns(&home, &group, path, started) {
                lines.push(format!(
                    "{size:<7} {path:<29} {:>10.2} µs {:>7.2}x",
                    m / 1e3,
                    m / base
                ));
            }
        }
    }
    let bases_base = median_ns(&home, BASES, "today_one_instrumentation", started);
    for path in [
        "with_1000_bases",
        "with_1000_selectors",
        "selected_among_1000",
        "index_1000_based",
        "base_change_1000_dependents",
    ] {
        if let (Some(base), Some(m)) = (bases_base, median_ns(&home, BASES, path, started)) {
            lines.push(format!(
                "{BASES:<7} {path:<29} {:>10.2} µs {:>7.2}x (of today_one_instrumentation)",
                m / 1e3,
                m / base
            ));
        }
    }
    if !lines.is_empty() {
        println!(
            "\nmedians and ratio to baseline_parse of the same size, bases to today's one Instrumentation (this run):"
        );
        println!("{}", lines.join("\n"));
    }
}
