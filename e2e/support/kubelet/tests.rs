//! Tests of `kubelet`: variables expanded and env resolved as the kubelet does.

use serde_json::json;

use super::*;

fn env_of(pod: &Value) -> Vec<(String, String)> {
    container_env(
        pod,
        &pod["spec"]["containers"][0],
        &json!({"cpu": "4", "memory": "16Gi"}),
        &Sources::default(),
    )
    .unwrap()
}

fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// "Define Dependent Environment Variables": a reference to a variable defined later is
/// left as written; `$$` escapes a reference.
#[test]
fn dependent_environment_variables_as_documented() {
    let pod = json!({"metadata": {"name": "dependent-envars-demo"}, "spec": {"containers": [{
    "name": "dependent-envars-demo",
    "env": [
        {"name": "SERVICE_PORT", "value": "80"},
        {"name": "SERVICE_IP", "value": "172.17.0.1"},
        {"name": "UNCHANGED_REFERENCE", "value": "$(PROTOCOL)://$(SERVICE_IP):$(SERVICE_PORT)"},
        {"name": "PROTOCOL", "value": "https"},
        {"name": "SERVICE_ADDRESS", "value": "$(PROTOCOL)://$(SERVICE_IP):$(SERVICE_PORT)"},
        {"name": "ESCAPED_REFERENCE", "value": "$$(PROTOCOL)://$(SERVICE_IP):$(SERVICE_PORT)"}
    ]}]}});
    assert_eq!(
        env_of(&pod),
        pairs(&[
            ("SERVICE_PORT", "80"),
            ("SERVICE_IP", "172.17.0.1"),
            ("UNCHANGED_REFERENCE", "$(PROTOCOL)://172.17.0.1:80"),
            ("PROTOCOL", "https"),
            ("SERVICE_ADDRESS", "https://172.17.0.1:80"),
            ("ESCAPED_REFERENCE", "$(PROTOCOL)://172.17.0.1:80"),
        ])
    );
}

#[test]
fn expansion_edge_cases() {
    let lookup = |v: &str| match v {
        "A" => Some("a".to_owned()),
        "EMPTY" => Some(String::new()),
        _ => None,
    };
    for (input, want) in [
        ("$(A)", "a"),
        ("___$(A)___", "___a___"),
        ("$(A)-$(A)", "a-a"),
        ("$(EMPTY)x", "x"),
        ("$$(A)", "$(A)"),
        ("$$$$$$(A)", "$$$(A)"),
        ("$$$(A)", "$a"),
        ("$(MISSING)", "$(MISSING)"),
        ("x$(MISSING)y$(A)", "x$(MISSING)ya"),
        ("$A", "$A"),
        ("$", "$"),
        ("a$", "a$"),
        ("$(", "$("),
        ("$(A", "$(A"),
        ("$()", "$()"),
        ("$(A)$", "a$"),
        ("no reference", "no reference"),
    ] {
        assert_eq!(expand(input, &lookup), want, "{input}");
    }
}

/// "Expose Pod Information to Containers Through Environment Variables": fieldRef.
#[test]
fn field_refs_as_documented() {
    let fref = |name: &str, path: &str| json!({"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}});
    let pod = json!({
        "metadata": {"name": "dapi-envars-fieldref", "namespace": "default",
                     "uid": "0b1c2d3e", "labels": {"app": "shop"},
                     "annotations": {"team": "checkout"}},
        "spec": {"nodeName": "kwok-node-0", "serviceAccountName": "default",
                 "containers": [{"name": "test-container", "env": [
            fref("MY_NODE_NAME", "spec.nodeName"),
            fref("MY_POD_NAME", "metadata.name"),
            fref("MY_POD_NAMESPACE", "metadata.namespace"),
            fref("MY_POD_IP", "status.podIP"),
            fref("MY_POD_SERVICE_ACCOUNT", "spec.serviceAccountName"),
            fref("MY_UID", "metadata.uid"),
            fref("MY_HOST_IP", "status.hostIP"),
            fref("MY_POD_IPS", "status.podIPs"),
            fref("MY_APP", "metadata.labels['app']"),
            fref("MY_TEAM", "metadata.annotations['team']"),
            fref("MY_NONE", "metadata.labels['none']"),
            {"name": "REF", "value": "$(MY_POD_NAMESPACE)/$(MY_POD_NAME)"}
        ]}]},
        "status": {"hostIP": "127.0.0.1", "podIP": "10.244.0.7",
                   "podIPs": [{"ip": "10.244.0.7"}, {"ip": "fd00::7"}]}
    });
    assert_eq!(
        env_of(&pod),
        pairs(&[
            ("MY_NODE_NAME", "kwok-node-0"),
            ("MY_POD_NAME", "dapi-envars-fieldref"),
            ("MY_POD_NAMESPACE", "default"),
            ("MY_POD_IP", "10.244.0.7"),
            ("MY_POD_SERVICE_ACCOUNT", "default"),
            ("MY_UID", "0b1c2d3e"),
            ("MY_HOST_IP", "127.0.0.1"),
            ("MY_POD_IPS", "10.244.0.7,fd00::7"),
            ("MY_APP", "shop"),
            ("MY_TEAM", "checkout"),
            ("MY_NONE", ""),
            ("REF", "default/dapi-envars-fieldref"),
        ])
    );
    let bad = json!({"spec": {"containers": [{"env": [fref("X", "metadata.labels")]}]}});
    assert!(
        container_env(
            &bad,
            &bad["spec"]["containers"][0],
            &json!({}),
            &Sources::default()
        )
        .is_err()
    );
}

/// The documentation's resourceFieldRef example (requests 125m/32Mi, limits 250m/64Mi,
/// divisors 1m and 1Mi), the default divisor rounding up, and an unset limit.
#[test]
fn resource_field_refs_as_documented() {
    let rref = |name: &str, res: &str, divisor: Option<&str>| {
        let mut r = json!({"containerName": "test-container", "resource": res});
        if let Some(d) = divisor {
            r["divisor"] = json!(d);
        }
        json!({"name": name, "valueFrom": {"resourceFieldRef": r}})
    };
    let pod = json!({"spec": {"containers": [{"name": "test-container",
    "resources": {"requests": {"memory": "32Mi", "cpu": "125m"},
                  "limits": {"memory": "64Mi", "cpu": "250m"}},
    "env": [
        rref("MY_CPU_REQUEST", "requests.cpu", Some("1m")),
        rref("MY_CPU_LIMIT", "limits.cpu", Some("1m")),
        rref("MY_MEM_REQUEST", "requests.memory", Some("1Mi")),
        rref("MY_MEM_LIMIT", "limits.memory", Some("1Mi")),
        rref("CPU_CORES", "limits.cpu", None),
        rref("MEM_BYTES", "limits.memory", None),
        rref("EPHEMERAL_LIMIT", "limits.ephemeral-storage", Some("1Gi")),
    ]}]}});
    let env = container_env(
        &pod,
        &pod["spec"]["containers"][0],
        &json!({"cpu": "4", "memory": "16Gi", "ephemeral-storage": "100Gi"}),
        &Sources::default(),
    )
    .unwrap();
    assert_eq!(
        env,
        pairs(&[
            ("MY_CPU_REQUEST", "125"),
            ("MY_CPU_LIMIT", "250"),
            ("MY_MEM_REQUEST", "32"),
            ("MY_MEM_LIMIT", "64"),
            ("CPU_CORES", "1"),
            ("MEM_BYTES", "67108864"),
            ("EPHEMERAL_LIMIT", "100"),
        ])
    );
}

#[test]
fn quantities() {
    for (q, nanos) in [
        ("1", 1_000_000_000i128),
        ("125m", 125_000_000),
        ("1.5", 1_500_000_000),
        ("0.1", 100_000_000),
        ("64Mi", 64 * (1 << 20) * 1_000_000_000),
        ("2k", 2_000_000_000_000),
        ("1e3", 1_000_000_000_000),
        ("5n", 5),
        ("-1m", -1_000_000),
    ] {
        assert_eq!(Quantity::parse(q).unwrap().nanos, nanos, "{q}");
    }
    assert_eq!(Quantity::parse("1.5").unwrap().whole(), 2);
    assert_eq!(Quantity::parse("1001u").unwrap().milli(), 2);
    for bad in ["", "m", "1x", "1.2.3", "."] {
        assert!(Quantity::parse(bad).is_err(), "{bad}");
    }
}

#[test]
fn duplicates_env_from_and_key_refs() {
    let sources = Sources {
        config_maps: [(
            "cfg".to_owned(),
            [("LEVEL".to_owned(), "debug".to_owned())].into(),
        )]
        .into(),
        secrets: [(
            "creds".to_owned(),
            [("token".to_owned(), "s3cr3t".to_owned())].into(),
        )]
        .into(),
    };
    let pod = json!({"spec": {"containers": [{"name": "c",
    "envFrom": [{"configMapRef": {"name": "cfg"}, "prefix": "APP_"},
                {"secretRef": {"name": "absent", "optional": true}}],
    "env": [
        {"name": "A", "value": "1"},
        {"name": "B", "value": "$(A)$(APP_LEVEL)"},
        {"name": "A", "value": "2"},
        {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "token"}}},
        {"name": "GONE", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "x", "optional": true}}},
        {"name": "EMPTY", "value": ""}
    ]}]}});
    let env = container_env(&pod, &pod["spec"]["containers"][0], &json!({}), &sources).unwrap();
    assert_eq!(
        env,
        pairs(&[
            ("APP_LEVEL", "debug"),
            ("A", "2"),
            ("B", "1debug"),
            ("TOKEN", "s3cr3t"),
            ("EMPTY", ""),
        ])
    );
}

#[test]
fn command_and_args_follow_the_image_and_expand_against_the_final_env() {
    let env = pairs(&[("PORT", "8080"), ("LATER", "x")]);
    let ep = ["java".to_owned()];
    let cmd = ["-jar".to_owned(), "/app.jar".to_owned()];
    let c = json!({"args": ["-Dport=$(PORT)", "$$(PORT)", "$(NOPE)"]});
    assert_eq!(
        command_line(&c, &ep, &cmd, &env),
        ["java", "-Dport=8080", "$(PORT)", "$(NOPE)"]
    );
    let c = json!({"command": ["sh", "-c", "echo $(LATER)"]});
    assert_eq!(command_line(&c, &ep, &cmd, &env), ["sh", "-c", "echo x"]);
    assert_eq!(
        command_line(&json!({}), &ep, &cmd, &env),
        ["java", "-jar", "/app.jar"]
    );
}
