//! The Helm chart `charts/otel-injector`, with Helm built from its Go module
//! (`scripts/e2e-build.sh helm`, pinned in `e2e/helm/go.mod`): `helm lint`, `helm template`
//! for each certificate mode and targeting mode, compared object by object with the kustomize
//! manifests (RBAC rules, webhook entries) and with exact Deployment arguments, and values the
//! schema refuses. The rendered output is applied to a real API server by the e2e suite
//! (`e2e/tests/install.rs`).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use serde_json::{Value, json};

use crate::rendered::{find, ids, manifest};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The `helm` binary: `scripts/e2e-build.sh helm` (cached; builds it on first use).
fn helm_bin() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let out = Command::new(root().join("scripts/e2e-build.sh"))
            .arg("helm")
            .stdin(Stdio::null())
            .stderr(Stdio::inherit())
            .output()
            .expect("run scripts/e2e-build.sh helm");
        assert!(out.status.success(), "scripts/e2e-build.sh helm failed");
        let dir = String::from_utf8_lossy(&out.stdout)
            .lines()
            .last()
            .expect("a directory")
            .trim()
            .to_owned();
        PathBuf::from(dir).join("helm")
    })
}

/// Runs helm with its state directories in a fresh temp dir; returns (success, stdout,
/// stderr).
fn helm(args: &[&str]) -> (bool, String, String) {
    let home = tempfile::tempdir().expect("temp dir");
    let out = Command::new(helm_bin())
        .args(args)
        .current_dir(root())
        .env("HELM_CACHE_HOME", home.path().join("cache"))
        .env("HELM_CONFIG_HOME", home.path().join("config"))
        .env("HELM_DATA_HOME", home.path().join("data"))
        .stdin(Stdio::null())
        .output()
        .expect("run helm");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `helm template otel-injector charts/otel-injector -n otel-injector` with these `--set`s,
/// as documents.
fn render(sets: &[&str]) -> Vec<Value> {
    let (ok, stdout, stderr) = helm(&release("template", sets, &[]));
    assert!(ok, "helm template {sets:?}: {stderr}");
    let docs: Vec<Value> = serde_saphyr::from_multiple(&stdout).expect("rendered YAML");
    docs.into_iter().filter(|d| !d.is_null()).collect()
}

/// `helm VERB otel-injector charts/otel-injector -n otel-injector`, then `extra`, with these
/// `--set`s.
fn release<'a>(verb: &'a str, sets: &[&'a str], extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec![
        verb,
        "otel-injector",
        "charts/otel-injector",
        "--namespace",
        "otel-injector",
    ];
    args.extend(extra);
    for s in sets {
        args.extend(["--set", s]);
    }
    args
}

/// The error of a `helm template` that must fail.
fn refused(sets: &[&str]) -> String {
    let mut args = vec!["template", "x", "charts/otel-injector"];
    for s in sets {
        args.extend(["--set", s]);
    }
    let (ok, _, stderr) = helm(&args);
    assert!(!ok, "helm template {sets:?} succeeded");
    stderr
}

fn args(docs: &[Value]) -> Vec<String> {
    find(docs, "Deployment/otel-injector")["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_array()
        .expect("args")
        .iter()
        .map(|a| a.as_str().expect("a string").to_owned())
        .collect()
}

const LANGUAGES: &str = "--enabled-languages=java,nodejs,python,dotnet,apache-httpd,nginx,sdk";
const FILE_TLS: [&str; 2] = [
    "--tls-cert-file=/tls/tls.crt",
    "--tls-key-file=/tls/tls.key",
];
const BUILT_IN_TLS: [&str; 4] = [
    "--certificate-secret=otel-injector/otel-injector-tls",
    "--webhook-configuration=otel-injector",
    "--certificate-host=otel-injector.otel-injector.svc",
    "--certificate-host=otel-injector.otel-injector.svc.cluster.local",
];

fn want_args(tls: &[&str], label_namespaces: bool) -> Vec<String> {
    let mut want = vec!["serve".to_owned()];
    want.extend(tls.iter().map(|s| s.to_string()));
    want.push(LANGUAGES.to_owned());
    want.push(format!("--label-namespaces={label_namespaces}"));
    want.extend(
        [
            "--verify-exporter-tls=false",
            "--agent-delivery=init-container",
            "--events=true",
            "--status=true",
            "--lease-name=otel-injector",
            "--log-format=json",
            "--log-level=info",
        ]
        .map(String::from),
    );
    want
}

/// The kinds and names every mode renders first, in Helm's order (by kind in its install
/// order, then by name; kinds it does not know last).
fn common_ids() -> Vec<&'static str> {
    vec![
        "PodDisruptionBudget/otel-injector",
        "ServiceAccount/otel-injector",
        "ClusterRole/otel-injector",
        "ClusterRole/otel-injector-events",
        "ClusterRole/otel-injector-status",
        "ClusterRoleBinding/otel-injector",
        "ClusterRoleBinding/otel-injector-events",
        "ClusterRoleBinding/otel-injector-status",
        "Role/otel-injector-status",
        "RoleBinding/otel-injector-status",
    ]
}

#[test]
fn chart_versions_are_the_crate_version() {
    let chart = std::fs::read_to_string(root().join("charts/otel-injector/Chart.yaml")).unwrap();
    let chart: Value = serde_saphyr::from_str(&chart).unwrap();
    let crate_version = env!("CARGO_PKG_VERSION");
    assert_eq!(chart["apiVersion"], "v2");
    assert_eq!(chart["version"], crate_version);
    assert_eq!(chart["appVersion"], crate_version);
}

#[test]
fn helm_lint_passes_for_every_mode() {
    for sets in [
        "certificates.mode=certManager",
        "certificates.mode=builtIn,webhook.targeting=targeted",
        "certificates.mode=existingSecret,certificates.existingSecret.name=tls",
        "serviceMonitor.enabled=true,prometheusRule.enabled=true,networkPolicy.enabled=true,\
         autoscaling.enabled=true,grafanaDashboard.enabled=true,verifyExporterTls=true",
    ] {
        let (ok, stdout, stderr) =
            helm(&["lint", "--strict", "charts/otel-injector", "--set", sets]);
        assert!(ok, "helm lint --set {sets}: {stdout}{stderr}");
        assert!(
            stdout.contains("1 chart(s) linted, 0 chart(s) failed"),
            "{stdout}"
        );
    }
}

#[test]
fn cert_manager_mode_renders_the_manifests_install_with_an_issuer_and_certificate() {
    let docs = render(&[]);
    let mut want = common_ids();
    want.extend([
        "Service/otel-injector",
        "Service/otel-injector-metrics",
        "Deployment/otel-injector",
        "MutatingWebhookConfiguration/otel-injector",
        "Certificate/otel-injector-ca",
        "Certificate/otel-injector",
        "Issuer/otel-injector-selfsigned",
        "Issuer/otel-injector-ca",
    ]);
    assert_eq!(ids(&docs), want);
    // The same read-only rules and the same webhook entry as the kustomize base; the events
    // permission as the events component grants it.
    let events = manifest("components/events/rbac.yaml");
    for id in [
        "ClusterRole/otel-injector-events",
        "ClusterRoleBinding/otel-injector-events",
    ] {
        for key in ["rules", "roleRef", "subjects"] {
            assert_eq!(find(&docs, id)[key], find(&events, id)[key], "{id} {key}");
        }
    }
    let base = manifest("base/otel-injector.yaml");
    assert_eq!(
        find(&docs, "ClusterRole/otel-injector")["rules"],
        find(&base, "ClusterRole/otel-injector")["rules"]
    );
    assert_eq!(
        find(&docs, "ClusterRoleBinding/otel-injector")["subjects"],
        json!([{"kind": "ServiceAccount", "name": "otel-injector", "namespace": "otel-injector"}])
    );
    let webhook = find(&docs, "MutatingWebhookConfiguration/otel-injector");
    assert_eq!(
        webhook["webhooks"],
        manifest("base/webhook.yaml")[0]["webhooks"]
    );
    assert_eq!(
        webhook["metadata"]["annotations"],
        json!({"cert-manager.io/inject-ca-from": "otel-injector/otel-injector"})
    );
    let certificate = find(&docs, "Certificate/otel-injector");
    assert_eq!(
        certificate["spec"],
        json!({
            "secretName": "otel-injector-tls",
            "dnsNames": ["otel-injector.otel-injector.svc",
                         "otel-injector.otel-injector.svc.cluster.local"],
            "duration": "2160h",
            "renewBefore": "720h",
            "issuerRef": {"kind": "Issuer", "name": "otel-injector-ca"},
            "privateKey": {"algorithm": "ECDSA", "size": 256, "rotationPolicy": "Always"},
        })
    );
    // The Issuers and the CA are the kustomize component's; the serving Certificate too,
    // but for the durations.
    let component = manifest("components/cert-manager/cert-manager.yaml");
    for id in [
        "Issuer/otel-injector-selfsigned",
        "Issuer/otel-injector-ca",
        "Certificate/otel-injector-ca",
    ] {
        assert_eq!(
            find(&docs, id)["spec"],
            find(&component, id)["spec"],
            "{id}"
        );
    }
    let deployment = find(&docs, "Deployment/otel-injector");
    let pod = &deployment["spec"]["template"]["spec"];
    assert_eq!(deployment["spec"]["replicas"], 2);
    assert_eq!(args(&docs), want_args(&FILE_TLS, false));
    assert_eq!(
        pod["containers"][0]["image"],
        "ghcr.io/otel-injector/otel-injector:0.1.0"
    );
    assert_eq!(
        pod["volumes"],
        json!([{"name": "tls", "secret": {"secretName": "otel-injector-tls"}}])
    );
    assert_eq!(pod["serviceAccountName"], "otel-injector");
    // The pod's hardening is the manifests'.
    let base_pod = &find(&base, "Deployment/otel-injector")["spec"]["template"]["spec"];
    assert_eq!(pod["securityContext"], base_pod["securityContext"]);
    for field in [
        "securityContext",
        "ports",
        "livenessProbe",
        "readinessProbe",
        "resources",
        "volumeMounts",
    ] {
        assert_eq!(
            pod["containers"][0][field], base_pod["containers"][0][field],
            "{field}"
        );
    }
    assert_eq!(
        find(&docs, "Service/otel-injector")["spec"]["ports"],
        find(&base, "Service/otel-injector")["spec"]["ports"]
    );
}

#[test]
fn built_in_mode_renders_the_rbac_of_the_built_in_component_and_no_volume() {
    let docs = render(&["certificates.mode=builtIn"]);
    let mut want = vec![
        "PodDisruptionBudget/otel-injector",
        "ServiceAccount/otel-injector",
        "ClusterRole/otel-injector",
        "ClusterRole/otel-injector-self-signed",
        "ClusterRole/otel-injector-events",
        "ClusterRole/otel-injector-status",
        "ClusterRoleBinding/otel-injector",
        "ClusterRoleBinding/otel-injector-self-signed",
        "ClusterRoleBinding/otel-injector-events",
        "ClusterRoleBinding/otel-injector-status",
    ];
    want.extend([
        "Role/otel-injector-self-signed",
        "Role/otel-injector-status",
        "RoleBinding/otel-injector-self-signed",
        "RoleBinding/otel-injector-status",
        "Service/otel-injector",
        "Service/otel-injector-metrics",
        "Deployment/otel-injector",
        "MutatingWebhookConfiguration/otel-injector",
    ]);
    assert_eq!(ids(&docs), want);
    let component = manifest("components/built-in/rbac.yaml");
    for id in [
        "Role/otel-injector-self-signed",
        "ClusterRole/otel-injector-self-signed",
    ] {
        assert_eq!(
            find(&docs, id)["rules"],
            find(&component, id)["rules"],
            "{id}"
        );
    }
    for id in [
        "RoleBinding/otel-injector-self-signed",
        "ClusterRoleBinding/otel-injector-self-signed",
    ] {
        assert_eq!(find(&docs, id)["roleRef"], find(&component, id)["roleRef"]);
        assert_eq!(
            find(&docs, id)["subjects"],
            find(&component, id)["subjects"]
        );
    }
    assert_eq!(args(&docs), want_args(&BUILT_IN_TLS, false));
    let pod = &find(&docs, "Deployment/otel-injector")["spec"]["template"]["spec"];
    assert_eq!(pod["volumes"], Value::Null);
    assert_eq!(pod["containers"][0]["volumeMounts"], Value::Null);
    let webhook = find(&docs, "MutatingWebhookConfiguration/otel-injector");
    assert_eq!(webhook["metadata"]["annotations"], Value::Null);
    assert_eq!(
        webhook["webhooks"],
        manifest("base/webhook.yaml")[0]["webhooks"]
    );
}

#[test]
fn rollout_is_off_by_default_and_when_enabled_renders_the_rbac_of_the_rollout_component() {
    let off = render(&[]);
    assert!(
        ids(&off).iter().all(|i| !i.contains("rollout")),
        "{:?}",
        ids(&off)
    );
    assert!(args(&off).iter().all(|a| !a.starts_with("--rollout")));

    let docs = render(&[
        "rollout.enabled=true",
        "rollout.concurrency=2",
        "rollout.timeout=90s",
        "status.enabled=false",
    ]);
    let component = manifest("components/rollout/rbac.yaml");
    for id in [
        "ClusterRole/otel-injector-rollout",
        "Role/otel-injector-rollout",
        "ClusterRoleBinding/otel-injector-rollout",
        "RoleBinding/otel-injector-rollout",
    ] {
        for field in ["rules", "roleRef", "subjects"] {
            assert_eq!(
                find(&docs, id)[field],
                find(&component, id)[field],
                "{id} {field}"
            );
        }
    }
    let roles: Vec<String> = ids(&docs)
        .into_iter()
        .filter(|i| i.contains("Role"))
        .collect();
    assert_eq!(
        roles,
        [
            "ClusterRole/otel-injector",
            "ClusterRole/otel-injector-events",
            "ClusterRole/otel-injector-rollout",
            "ClusterRoleBinding/otel-injector",
            "ClusterRoleBinding/otel-injector-events",
            "ClusterRoleBinding/otel-injector-rollout",
            "Role/otel-injector-rollout",
            "RoleBinding/otel-injector-rollout",
        ]
    );
    let mut want = want_args(&FILE_TLS, false);
    let at = want
        .iter()
        .position(|a| a == "--lease-name=otel-injector")
        .expect("the Lease's name")
        + 1;
    for (i, a) in [
        "--rollout=true",
        "--rollout-concurrency=2",
        "--rollout-timeout=90s",
        "--rollout-excluded-namespaces=kube-system,otel-injector",
    ]
    .into_iter()
    .enumerate()
    {
        want.insert(at + i, a.to_owned());
    }
    for a in &mut want {
        if a == "--status=true" {
            *a = "--status=false".into();
        }
    }
    assert_eq!(args(&docs), want);
}

#[test]
fn status_renders_the_rbac_of_the_status_component_or_nothing_when_disabled() {
    let docs = render(&[]);
    let component = manifest("components/status/rbac.yaml");
    for id in [
        "ClusterRole/otel-injector-status",
        "Role/otel-injector-status",
        "ClusterRoleBinding/otel-injector-status",
        "RoleBinding/otel-injector-status",
    ] {
        for field in ["rules", "roleRef", "subjects"] {
            assert_eq!(
                find(&docs, id)[field],
                find(&component, id)[field],
                "{id} {field}"
            );
        }
    }
    assert_eq!(
        find(&docs, "Role/otel-injector-status")["metadata"]["namespace"],
        "otel-injector"
    );

    let off = render(&["status.enabled=false"]);
    let roles: Vec<String> = ids(&off)
        .into_iter()
        .filter(|i| i.contains("Role"))
        .collect();
    assert_eq!(
        roles,
        [
            "ClusterRole/otel-injector",
            "ClusterRole/otel-injector-events",
            "ClusterRoleBinding/otel-injector",
            "ClusterRoleBinding/otel-injector-events"
        ]
    );
    let mut want = want_args(&FILE_TLS, false);
    want.retain(|a| a != "--lease-name=otel-injector");
    for a in &mut want {
        if a == "--status=true" {
            *a = "--status=false".into();
        }
    }
    assert_eq!(args(&off), want);
}

#[test]
fn existing_secret_mode_mounts_that_secret_and_sets_the_ca_bundle() {
    let docs = render(&[
        "certificates.mode=existingSecret",
        "certificates.existingSecret.name=my-tls",
        "certificates.existingSecret.caBundle=Q0EK",
    ]);
    let mut want = common_ids();
    want.extend([
        "Service/otel-injector",
        "Service/otel-injector-metrics",
        "Deployment/otel-injector",
        "MutatingWebhookConfiguration/otel-injector",
    ]);
    assert_eq!(ids(&docs), want);
    assert_eq!(args(&docs), want_args(&FILE_TLS, false));
    let pod = &find(&docs, "Deployment/otel-injector")["spec"]["template"]["spec"];
    assert_eq!(
        pod["volumes"],
        json!([{"name": "tls", "secret": {"secretName": "my-tls"}}])
    );
    let webhook = find(&docs, "MutatingWebhookConfiguration/otel-injector");
    assert_eq!(webhook["metadata"]["annotations"], Value::Null);
    let mut entries = manifest("base/webhook.yaml")[0]["webhooks"].clone();
    entries[0]["clientConfig"]["caBundle"] = json!("Q0EK");
    assert_eq!(webhook["webhooks"], entries);
}

#[test]
fn targeted_mode_renders_the_targeted_component_in_every_certificate_mode() {
    let targeted_entries =
        manifest("components/targeted/webhook-targeted.yaml")[0]["webhooks"].clone();
    let component = manifest("components/targeted/rbac.yaml");
    for (mode, tls) in [
        ("certManager", &FILE_TLS[..]),
        ("builtIn", &BUILT_IN_TLS[..]),
        ("existingSecret", &FILE_TLS[..]),
    ] {
        let docs = render(&[
            "webhook.targeting=targeted",
            &format!("certificates.mode={mode}"),
            "certificates.existingSecret.name=otel-injector-tls",
        ]);
        assert_eq!(
            find(&docs, "ClusterRole/otel-injector-targeted")["rules"],
            find(&component, "ClusterRole/otel-injector-targeted")["rules"],
            "{mode}"
        );
        assert_eq!(
            find(&docs, "ClusterRoleBinding/otel-injector-targeted")["subjects"],
            find(&component, "ClusterRoleBinding/otel-injector-targeted")["subjects"],
            "{mode}"
        );
        assert_eq!(
            find(&docs, "MutatingWebhookConfiguration/otel-injector")["webhooks"],
            targeted_entries,
            "{mode}"
        );
        assert_eq!(args(&docs), want_args(tls, true), "{mode}");
        let roles: Vec<String> = ids(&docs)
            .into_iter()
            .filter(|i| i.contains("Role"))
            .collect();
        let want = if mode == "builtIn" {
            vec![
                "ClusterRole/otel-injector",
                "ClusterRole/otel-injector-self-signed",
                "ClusterRole/otel-injector-targeted",
                "ClusterRole/otel-injector-events",
                "ClusterRole/otel-injector-status",
                "ClusterRoleBinding/otel-injector",
                "ClusterRoleBinding/otel-injector-self-signed",
                "ClusterRoleBinding/otel-injector-targeted",
                "ClusterRoleBinding/otel-injector-events",
                "ClusterRoleBinding/otel-injector-status",
                "Role/otel-injector-self-signed",
                "Role/otel-injector-status",
                "RoleBinding/otel-injector-self-signed",
                "RoleBinding/otel-injector-status",
            ]
        } else {
            vec![
                "ClusterRole/otel-injector",
                "ClusterRole/otel-injector-targeted",
                "ClusterRole/otel-injector-events",
                "ClusterRole/otel-injector-status",
                "ClusterRoleBinding/otel-injector",
                "ClusterRoleBinding/otel-injector-targeted",
                "ClusterRoleBinding/otel-injector-events",
                "ClusterRoleBinding/otel-injector-status",
                "Role/otel-injector-status",
                "RoleBinding/otel-injector-status",
            ]
        };
        assert_eq!(roles, want, "{mode}: each permission only with its feature");
    }
}

#[test]
fn values_reach_the_deployment_the_webhook_and_the_optional_objects() {
    let docs = render(&[
        "image.registry=registry.example",
        "image.repository=team/injector",
        "image.tag=1.2.3",
        "image.digest=sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
        "languages={java,go}",
        "agentImages.java=registry.example/java:2",
        "verifyExporterTls=true",
        "logFormat=plain",
        "logLevel=debug",
        "extraArgs={--go-sidecar=native}",
        "extraEnv[0].name=RUST_BACKTRACE",
        "extraEnv[0].value=full",
        "webhook.failurePolicy=Fail",
        "webhook.timeoutSeconds=10",
        "webhook.excludedNamespaces={kube-system,ops}",
        "priorityClassName=system-cluster-critical",
        "nodeSelector.pool=infra",
        "autoscaling.enabled=true",
        "podDisruptionBudget.enabled=false",
        "networkPolicy.enabled=true",
        "serviceMonitor.enabled=true",
        "prometheusRule.enabled=true",
        "grafanaDashboard.enabled=true",
        "events.enabled=false",
    ]);
    assert_eq!(
        ids(&docs),
        [
            "NetworkPolicy/otel-injector",
            "ServiceAccount/otel-injector",
            "ConfigMap/otel-injector-dashboard",
            "ClusterRole/otel-injector",
            "ClusterRole/otel-injector-verify-exporter-tls",
            "ClusterRole/otel-injector-status",
            "ClusterRoleBinding/otel-injector",
            "ClusterRoleBinding/otel-injector-verify-exporter-tls",
            "ClusterRoleBinding/otel-injector-status",
            "Role/otel-injector-status",
            "RoleBinding/otel-injector-status",
            "Service/otel-injector",
            "Service/otel-injector-metrics",
            "Deployment/otel-injector",
            "HorizontalPodAutoscaler/otel-injector",
            "MutatingWebhookConfiguration/otel-injector",
            "Certificate/otel-injector-ca",
            "Certificate/otel-injector",
            "Issuer/otel-injector-selfsigned",
            "Issuer/otel-injector-ca",
            "PrometheusRule/otel-injector",
            "ServiceMonitor/otel-injector",
        ]
    );
    assert_eq!(
        args(&docs),
        [
            "serve",
            "--tls-cert-file=/tls/tls.crt",
            "--tls-key-file=/tls/tls.key",
            "--enabled-languages=java,go",
            "--agent-image=java=registry.example/java:2",
            "--label-namespaces=false",
            "--verify-exporter-tls=true",
            "--agent-delivery=init-container",
            "--events=false",
            "--status=true",
            "--lease-name=otel-injector",
            "--log-format=plain",
            "--log-level=debug",
            "--go-sidecar=native",
        ]
    );
    let deployment = find(&docs, "Deployment/otel-injector");
    assert_eq!(
        deployment["spec"]["replicas"],
        Value::Null,
        "the HPA scales"
    );
    let pod = &deployment["spec"]["template"]["spec"];
    assert_eq!(
        pod["containers"][0]["image"],
        "registry.example/team/injector:1.2.3@sha256:\
         0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
    );
    assert_eq!(
        pod["containers"][0]["env"],
        json!([{"name": "RUST_BACKTRACE", "value": "full"}])
    );
    assert_eq!(pod["priorityClassName"], "system-cluster-critical");
    assert_eq!(pod["nodeSelector"], json!({"pool": "infra"}));
    // events.enabled=false: no Events, and no permission for them (the role list above).
    let tls_role = manifest("components/verify-exporter-tls/rbac.yaml");
    assert_eq!(
        find(&docs, "ClusterRole/otel-injector-verify-exporter-tls")["rules"],
        find(&tls_role, "ClusterRole/otel-injector-verify-exporter-tls")["rules"]
    );
    let entry = &find(&docs, "MutatingWebhookConfiguration/otel-injector")["webhooks"][0];
    assert_eq!(entry["failurePolicy"], "Fail");
    assert_eq!(entry["timeoutSeconds"], 10);
    assert_eq!(
        entry["namespaceSelector"]["matchExpressions"][0],
        json!({"key": "kubernetes.io/metadata.name", "operator": "NotIn",
               "values": ["kube-system", "ops", "otel-injector"]})
    );
    assert_eq!(
        find(&docs, "NetworkPolicy/otel-injector")["spec"],
        json!({
            "podSelector": {"matchLabels": {"app.kubernetes.io/name": "otel-injector",
                                            "app.kubernetes.io/instance": "otel-injector"}},
            "policyTypes": ["Ingress"],
            "ingress": [
                {"ports": [{"port": "webhook", "protocol": "TCP"}]},
                {"from": [{"namespaceSelector": {"matchLabels":
                    {"kubernetes.io/metadata.name": "monitoring"}}}],
                 "ports": [{"port": "admin", "protocol": "TCP"}]},
            ]
        })
    );
    assert_eq!(
        find(&docs, "HorizontalPodAutoscaler/otel-injector")["spec"]["minReplicas"],
        2
    );
    assert_eq!(
        find(&docs, "ServiceMonitor/otel-injector")["spec"],
        json!({
            "selector": {"matchLabels": {"app.kubernetes.io/name": "otel-injector",
                                         "app.kubernetes.io/instance": "otel-injector",
                                         "app.kubernetes.io/component": "metrics"}},
            "endpoints": [{"port": "admin", "path": "/metrics", "interval": "30s"}],
        })
    );
    // The metrics Service carries the labels the ServiceMonitor selects.
    let labels = &find(&docs, "Service/otel-injector-metrics")["metadata"]["labels"];
    assert_eq!(labels["app.kubernetes.io/component"], "metrics");
    assert_eq!(labels["app.kubernetes.io/instance"], "otel-injector");
    // The rule groups are the chart file's, as they are.
    let rules_file =
        std::fs::read_to_string(root().join("charts/otel-injector/files/prometheus-rules.yaml"))
            .unwrap();
    let rules_file: Value = serde_saphyr::from_str(&rules_file).unwrap();
    assert_eq!(
        find(&docs, "PrometheusRule/otel-injector")["spec"]["groups"],
        rules_file["groups"]
    );
    let dashboard = find(&docs, "ConfigMap/otel-injector-dashboard");
    assert_eq!(dashboard["metadata"]["labels"]["grafana_dashboard"], "1");
    assert_eq!(
        dashboard["data"]["otel-injector.json"],
        std::fs::read_to_string(root().join("charts/otel-injector/files/dashboard.json")).unwrap()
    );
}

#[test]
fn another_release_name_and_namespace_name_everything_after_them() {
    let mut args = vec![
        "template",
        "edge",
        "charts/otel-injector",
        "-n",
        "telemetry",
    ];
    args.extend(["--set", "certificates.mode=builtIn"]);
    let (ok, stdout, stderr) = helm(&args);
    assert!(ok, "{stderr}");
    let docs: Vec<Value> = serde_saphyr::from_multiple(&stdout).unwrap();
    let docs: Vec<Value> = docs.into_iter().filter(|d| !d.is_null()).collect();
    let deployment = find(&docs, "Deployment/edge-otel-injector");
    assert_eq!(
        json!(
            deployment["spec"]["template"]["spec"]["containers"][0]["args"]
                .as_array()
                .expect("args")[1..5]
        ),
        json!([
            "--certificate-secret=telemetry/edge-otel-injector-tls",
            "--webhook-configuration=edge-otel-injector",
            "--certificate-host=edge-otel-injector.telemetry.svc",
            "--certificate-host=edge-otel-injector.telemetry.svc.cluster.local",
        ])
    );
    let role = find(&docs, "ClusterRole/edge-otel-injector-self-signed");
    assert_eq!(
        role["rules"][0]["resourceNames"],
        json!(["edge-otel-injector"])
    );
    let entry = &find(&docs, "MutatingWebhookConfiguration/edge-otel-injector")["webhooks"][0];
    assert_eq!(
        entry["clientConfig"]["service"],
        json!({"name": "edge-otel-injector", "namespace": "telemetry",
               "path": "/mutate-v1-pod", "port": 443})
    );
    assert_eq!(
        entry["namespaceSelector"]["matchExpressions"][0]["values"],
        json!(["kube-system", "telemetry"])
    );
}

/// The lines of helm's error that name the values at fault.
fn schema_errors(stderr: &str) -> Vec<String> {
    stderr
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with("- at '"))
        .map(String::from)
        .collect()
}

#[test]
fn the_schema_refuses_wrong_values_with_the_path_and_the_reason() {
    for (sets, want) in [
        (
            &["agentDelivery=sometimes"][..],
            vec![
                "- at '/agentDelivery': value must be one of 'init-container', \
                 'image-volume', 'auto'",
            ],
        ),
        (
            &["webhook.failurePolicy=Sometimes"][..],
            vec!["- at '/webhook/failurePolicy': value must be one of 'Ignore', 'Fail'"],
        ),
        (
            &["certificates.mode=selfSigned"][..],
            vec![
                "- at '/certificates/mode': value must be one of 'certManager', 'builtIn', \
                 'existingSecret'",
            ],
        ),
        (
            &["languages={java,cobol}"][..],
            vec![
                "- at '/languages/1': value must be one of 'java', 'nodejs', 'python', \
                 'dotnet', 'go', 'apache-httpd', 'nginx', 'sdk'",
            ],
        ),
        (
            &["replicas=0"][..],
            vec!["- at '/replicas': minimum: got 0, want 1"],
        ),
        (
            &["rollout.concurrency=0"][..],
            vec!["- at '/rollout/concurrency': minimum: got 0, want 1"],
        ),
        (
            &["webhook.timeoutSeconds=31"][..],
            vec!["- at '/webhook/timeoutSeconds': maximum: got 31, want 30"],
        ),
        (
            &["replica=3"][..],
            vec!["- at '': additional properties 'replica' not allowed"],
        ),
        (
            &["certificates.mode=existingSecret"][..],
            vec![
                "- at '/certificates': 'allOf' failed",
                "- at '/certificates/existingSecret/name': minLength: got 0, want 1",
            ],
        ),
        (
            // `--set` makes 1 a number; an env value must be a string (`--set-string`).
            &["extraEnv[0].name=A", "extraEnv[0].value=1"][..],
            vec!["- at '/extraEnv/0/value': got number, want string"],
        ),
        (
            &["image.digest=latest"][..],
            vec![
                "- at '/image/digest': 'latest' does not match pattern \
                 '^(sha256:[a-f0-9]{64})?$'",
            ],
        ),
    ] {
        let stderr = refused(sets);
        assert!(
            stderr.contains("values don't meet the specifications of the schema(s)"),
            "{sets:?}: {stderr}"
        );
        assert_eq!(schema_errors(&stderr), want, "{sets:?}: {stderr}");
    }
}

#[test]
fn a_prometheus_rule_file_without_groups_fails_the_render() {
    let dir = tempfile::tempdir().unwrap();
    let chart = dir.path().join("otel-injector");
    copy_dir(&root().join("charts/otel-injector"), &chart);
    std::fs::write(chart.join("files/prometheus-rules.yaml"), "rules: []\n").unwrap();
    let (ok, _, stderr) = helm(&[
        "template",
        "x",
        chart.to_str().unwrap(),
        "--set",
        "prometheusRule.enabled=true",
    ]);
    assert!(!ok);
    assert!(
        stderr.contains(
            "files/prometheus-rules.yaml must be a YAML document with a top-level groups: list"
        ),
        "{stderr}"
    );
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let target = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &target);
        } else {
            std::fs::copy(e.path(), &target).unwrap();
        }
    }
}

#[test]
fn agent_delivery_auto_renders_the_flag_and_the_rbac_of_its_component() {
    let default = render(&[]);
    assert!(!ids(&default).iter().any(|i| i.contains("agent-delivery")));
    for delivery in ["image-volume", "auto"] {
        let docs = render(&[&format!("agentDelivery={delivery}")]);
        let deployment = find(&docs, "Deployment/otel-injector");
        let args = &deployment["spec"]["template"]["spec"]["containers"][0]["args"];
        let flags: Vec<&str> = args
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|a| a.as_str()?.strip_prefix("--agent-delivery="))
            .collect();
        assert_eq!(flags, [delivery]);
        let roles: Vec<String> = ids(&docs)
            .into_iter()
            .filter(|i| i.contains("agent-delivery"))
            .collect();
        if delivery == "image-volume" {
            assert!(roles.is_empty(), "{roles:?}");
            continue;
        }
        assert_eq!(
            roles,
            [
                "ClusterRole/otel-injector-agent-delivery-auto",
                "ClusterRoleBinding/otel-injector-agent-delivery-auto",
            ]
        );
        let component = manifest("components/agent-delivery-auto/rbac.yaml");
        for id in &roles {
            for field in ["rules", "roleRef", "subjects"] {
                assert_eq!(
                    find(&docs, id)[field],
                    find(&component, id)[field],
                    "{id} {field}"
                );
            }
        }
    }
}

/// The rules of `<release>-self-signed` with built-in certificates in mode `policy`: the
/// CRD's caBundle only (no webhook configuration to write); the same in the kustomize
/// component (`tests/tools/kustomize.rs`).
pub const POLICY_SELF_SIGNED_RULES: &str = r#"[{"apiGroups": ["apiextensions.k8s.io"], "resources": ["customresourcedefinitions"], "resourceNames": ["instrumentations.opentelemetry.io"], "verbs": ["get", "patch"]}]"#;

#[test]
fn mode_policy_registers_no_webhook_and_mode_both_renders_the_webhooks_install() {
    for tls in ["certManager", "builtIn"] {
        let sets = |mode: &str| [format!("certificates.mode={tls}"), format!("mode={mode}")];
        let render_mode = |mode: &str| {
            let sets = sets(mode);
            render(&sets.iter().map(String::as_str).collect::<Vec<_>>())
        };
        let webhook = render_mode("webhook");
        assert_eq!(
            render_mode("both"),
            webhook,
            "{tls}: both installs the webhook's objects"
        );
        let policy = render_mode("policy");
        let mut want = ids(&webhook);
        want.retain(|id| id != "MutatingWebhookConfiguration/otel-injector");
        assert_eq!(
            ids(&policy),
            want,
            "{tls}: everything but the webhook configuration"
        );
        let mut want_args = args(&webhook);
        if tls == "builtIn" {
            for a in &mut want_args {
                if a == "--webhook-configuration=otel-injector" {
                    *a = "--webhook-configuration=".into();
                }
            }
            let rules: Value = serde_json::from_str(POLICY_SELF_SIGNED_RULES).unwrap();
            assert_eq!(
                find(&policy, "ClusterRole/otel-injector-self-signed")["rules"],
                rules
            );
        }
        assert_eq!(args(&policy), want_args, "{tls}");
    }
    assert!(
        refused(&["mode=policies"])
            .contains("at '/mode': value must be one of 'webhook', 'policy', 'both'"),
        "{}",
        refused(&["mode=policies"])
    );
}

#[test]
fn the_notes_say_how_to_render_and_apply_the_policies_of_the_mode() {
    let notes = |sets: &[&str]| {
        let (ok, stdout, stderr) = helm(&release("install", sets, &["--dry-run=client"]));
        assert!(ok, "helm install --dry-run {sets:?}: {stderr}");
        stdout
    };
    let policy = notes(&["mode=policy", "languages={java,python}"]);
    assert!(
        policy.contains(
            "  otel-injector policy --mode policy --cluster --enabled-languages=java,python | kubectl apply -f -\n"
        ),
        "{policy}"
    );
    assert!(policy.contains("no webhook is registered"), "{policy}");
    let both = notes(&["mode=both"]);
    assert!(
        both.contains("otel-injector policy --mode both --cluster"),
        "{both}"
    );
    assert!(!notes(&[]).contains("otel-injector policy"));
}

#[test]
fn the_safety_net_renders_its_flags_and_the_rbac_of_the_rollback_component() {
    let detect = render(&["status.detectFailures=true"]);
    assert!(ids(&detect).iter().all(|i| !i.contains("rollback")));
    let at = |docs: &[Value], flag: &str| args(docs).iter().position(|a| a == flag);
    assert_eq!(
        at(&detect, "--detect-failures=true"),
        at(&detect, "--status=true").map(|i| i + 1)
    );

    let docs = render(&[
        "status.rollback=true",
        "rollout.enabled=true",
        "rollout.canarySoak=2m",
    ]);
    let component = manifest("components/rollback/rbac.yaml");
    for id in [
        "ClusterRole/otel-injector-rollback",
        "ClusterRoleBinding/otel-injector-rollback",
    ] {
        for field in ["rules", "roleRef", "subjects"] {
            assert_eq!(
                find(&docs, id)[field],
                find(&component, id)[field],
                "{id} {field}"
            );
        }
    }
    let a = args(&docs);
    assert!(a.contains(&"--rollback=true".to_owned()), "{a:?}");
    assert!(
        !a.contains(&"--detect-failures=true".to_owned()),
        "implied: {a:?}"
    );
    assert!(a.contains(&"--rollout-canary-soak=2m".to_owned()), "{a:?}");
    let (ok, _, stderr) = helm(&release(
        "template",
        &["status.rollback=true", "status.enabled=false"],
        &[],
    ));
    assert!(
        !ok && stderr.contains("status.rollback needs status.enabled"),
        "{stderr}"
    );
}
