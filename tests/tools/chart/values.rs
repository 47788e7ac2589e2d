//! Values through the chart: into the Deployment, the webhook and the optional objects, under
//! another release name and namespace, and refused by the schema with the path and the reason.

use serde_json::{Value, json};

use crate::rendered::{find, ids, manifest};

use super::{args, copy_dir, helm, refused, render, root};

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
pub(super) fn schema_errors(stderr: &str) -> Vec<String> {
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

#[test]
fn the_webhook_port_is_opened_only_to_the_given_peers() {
    let docs = render(&[
        "networkPolicy.enabled=true",
        "networkPolicy.webhookFrom[0].ipBlock.cidr=10.0.0.0/24",
        "networkPolicy.webhookFrom[1].namespaceSelector.matchLabels.kubernetes\\.io/metadata\\.name=kube-system",
        "networkPolicy.webhookFrom[1].podSelector.matchLabels.app=konnectivity-agent",
    ]);
    assert_eq!(
        find(&docs, "NetworkPolicy/otel-injector")["spec"]["ingress"][0],
        json!({
            "from": [
                {"ipBlock": {"cidr": "10.0.0.0/24"}},
                {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
                 "podSelector": {"matchLabels": {"app": "konnectivity-agent"}}},
            ],
            "ports": [{"port": "webhook", "protocol": "TCP"}]
        })
    );
}

/// The Deployment's pod spec and its arguments that start with `prefix`.
fn args_starting(docs: &[Value], prefix: &str) -> (Value, Vec<String>) {
    let spec = find(docs, "Deployment/otel-injector")["spec"]["template"]["spec"].clone();
    let args = spec["containers"][0]["args"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .filter(|a| a.starts_with(prefix))
        .map(str::to_owned)
        .collect();
    (spec, args)
}

#[test]
fn authentication_mounts_the_named_secrets_and_passes_their_files() {
    let docs = render(&[
        "webhook.authentication.clientCASecret=apiserver-client-ca",
        "webhook.authentication.tokenSecret=apiserver-tokens",
        "webhook.authentication.boundTokens=true",
    ]);
    let (spec, args) = args_starting(&docs, "--webhook-");
    assert_eq!(
        args,
        [
            "--webhook-client-ca-file=/auth/client-ca/ca.crt",
            "--webhook-token-file=/auth/tokens/tokens",
            "--webhook-bound-token-audience=https://otel-injector.otel-injector.svc:443/mutate-v1-pod",
            "--webhook-configuration=otel-injector"
        ]
    );
    assert_eq!(
        spec["volumes"],
        json!([
            {"name": "tls", "secret": {"secretName": "otel-injector-tls"}},
            {"name": "client-ca", "secret": {"secretName": "apiserver-client-ca",
                                             "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
            {"name": "tokens", "secret": {"secretName": "apiserver-tokens",
                                          "items": [{"key": "tokens", "path": "tokens"}]}},
        ])
    );
    assert_eq!(
        spec["containers"][0]["volumeMounts"],
        json!([
            {"name": "tls", "mountPath": "/tls", "readOnly": true},
            {"name": "client-ca", "mountPath": "/auth/client-ca", "readOnly": true},
            {"name": "tokens", "mountPath": "/auth/tokens", "readOnly": true},
        ])
    );
    // Built-in certificates name the configuration already: once.
    let builtin = render(&[
        "certificates.mode=builtIn",
        "webhook.authentication.boundTokens=true",
    ]);
    let (_, named) = args_starting(&builtin, "--webhook-configuration");
    assert_eq!(named, ["--webhook-configuration=otel-injector"]);
    // Nothing named: no flag, no volume beyond the certificate's.
    let plain = render(&[]);
    let spec = &find(&plain, "Deployment/otel-injector")["spec"]["template"]["spec"];
    assert_eq!(spec["volumes"].as_array().map(Vec::len), Some(1));
}

#[test]
fn the_registration_check_passes_its_flags_and_grants_get_on_the_configuration_alone() {
    let docs = render(&[
        "webhook.checkRegistration=true",
        "webhook.failurePolicy=Fail",
    ]);
    let args: Vec<&str> = find(&docs, "Deployment/otel-injector")["spec"]["template"]["spec"]
        ["containers"][0]["args"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .filter(|a| a.contains("registration"))
        .collect();
    assert_eq!(
        args,
        [
            "--check-registration=true",
            "--registration-failure-policy=Fail"
        ]
    );
    assert_eq!(
        find(&docs, "ClusterRole/otel-injector-registration-check")["rules"],
        json!([{"apiGroups": ["admissionregistration.k8s.io"],
                "resources": ["mutatingwebhookconfigurations"],
                "resourceNames": ["otel-injector"], "verbs": ["get"]}])
    );
    // Off by default; built-in certificates already grant the get.
    assert!(
        !ids(&render(&[])).iter().any(|i| i.contains("registration")),
        "nothing by default"
    );
    let built_in = render(&[
        "webhook.checkRegistration=true",
        "certificates.mode=builtIn",
    ]);
    assert!(!ids(&built_in).iter().any(|i| i.contains("registration")));
}
