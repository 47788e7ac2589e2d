//! The certificate and component modes of the chart (cert-manager, built-in, an existing
//! Secret, targeted, rollout, status), each rendering what its kustomize component installs.

use serde_json::{Value, json};

use crate::rendered::{find, ids, manifest};

use super::{BUILT_IN_TLS, FILE_TLS, args, assert_rbac_of, common_ids, render, want_args};

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
    assert_rbac_of(
        &docs,
        "components/rollout/rbac.yaml",
        &[
            "ClusterRole/otel-injector-rollout",
            "Role/otel-injector-rollout",
            "ClusterRoleBinding/otel-injector-rollout",
            "RoleBinding/otel-injector-rollout",
        ],
    );
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
fn live_policies_render_the_rbac_of_their_component_and_need_a_policy_mode() {
    assert!(
        ids(&render(&["mode=both"]))
            .iter()
            .all(|i| !i.contains("live-policies"))
    );
    let docs = render(&["mode=both", "livePolicies=true", "status.enabled=false"]);
    assert_rbac_of(
        &docs,
        "components/live-policies/rbac.yaml",
        &[
            "ClusterRole/otel-injector-live-policies",
            "ClusterRoleBinding/otel-injector-live-policies",
            "Role/otel-injector-live-policies",
            "RoleBinding/otel-injector-live-policies",
        ],
    );
    let live: Vec<String> = args(&docs)
        .into_iter()
        .filter(|a| a.starts_with("--apply-policies") || a.starts_with("--lease-name"))
        .collect();
    assert_eq!(
        live,
        ["--lease-name=otel-injector", "--apply-policies=both"]
    );
    let policy = render(&["mode=policy", "livePolicies=true"]);
    assert!(args(&policy).contains(&"--apply-policies=policy".to_owned()));
    assert!(
        super::refused(&["livePolicies=true"]).contains("livePolicies needs mode policy or both")
    );
}
