//! The Helm chart `charts/otel-injector`, with Helm built from its Go module
//! (`scripts/e2e-build.sh helm`, pinned in `e2e/helm/go.mod`): `helm lint`, `helm template`
//! for each certificate mode and targeting mode, compared object by object with the kustomize
//! manifests (RBAC rules, webhook entries) and with exact Deployment arguments, and values the
//! schema refuses. The rendered output is applied to a real API server by the e2e suite
//! (`e2e/tests/install.rs`).

mod modes;
mod values;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use serde_json::Value;

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

/// The chart's objects `ids` in `docs` have the rules, roleRef and subjects of the kustomize
/// component's (`component`, under manifests/).
fn assert_rbac_of(docs: &[Value], component: &str, ids: &[&str]) {
    let component = manifest(component);
    for id in ids {
        for field in ["rules", "roleRef", "subjects"] {
            assert_eq!(
                find(docs, id)[field],
                find(&component, id)[field],
                "{id} {field}"
            );
        }
    }
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
fn the_kustomize_base_runs_the_charts_image() {
    let values = std::fs::read_to_string(root().join("charts/otel-injector/values.yaml")).unwrap();
    let values: Value = serde_saphyr::from_str(&values).unwrap();
    let image = &values["image"];
    let chart_image = format!(
        "{}/{}:{}",
        image["registry"].as_str().unwrap(),
        image["repository"].as_str().unwrap(),
        env!("CARGO_PKG_VERSION")
    );
    let base = std::fs::read_to_string(root().join("manifests/base/otel-injector.yaml")).unwrap();
    let images: Vec<&str> = base
        .lines()
        .filter_map(|l| l.trim().strip_prefix("image: "))
        .collect();
    assert_eq!(images, [chart_image.as_str()]);
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
    assert_rbac_of(
        &docs,
        "components/rollback/rbac.yaml",
        &[
            "ClusterRole/otel-injector-rollback",
            "ClusterRoleBinding/otel-injector-rollback",
        ],
    );
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
