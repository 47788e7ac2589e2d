use serde_json::json;

use super::*;

fn object(kind: &str, name: &str, rule: &str) -> Value {
    json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": kind,
           "metadata": {"name": name}, "spec": {"rule": rule}})
}

fn key(kind: &str, name: &str) -> (String, String) {
    (kind.to_owned(), name.to_owned())
}

const POLICY: &str = "MutatingAdmissionPolicy";
const BINDING: &str = "MutatingAdmissionPolicyBinding";

#[test]
fn a_pass_writes_what_is_new_changed_or_moved_and_nothing_else() {
    let kept = object(POLICY, "oi.shop.java", "a");
    let edited = object(POLICY, "oi.shop.node", "new");
    let moved = object(POLICY, "oi.shop.python", "c");
    let added = object(POLICY, "oi.shop.dotnet", "d");
    let applied: Applied = [
        (key(POLICY, "oi.shop.java"), (kept.clone(), "10".to_owned())),
        (
            key(POLICY, "oi.shop.node"),
            (object(POLICY, "oi.shop.node", "old"), "11".to_owned()),
        ),
        (
            key(POLICY, "oi.shop.python"),
            (moved.clone(), "12".to_owned()),
        ),
    ]
    .into();
    let present: Present = [
        (key(POLICY, "oi.shop.java"), "10".to_owned()),
        (key(POLICY, "oi.shop.node"), "11".to_owned()),
        // Edited by someone else since this writer applied it.
        (key(POLICY, "oi.shop.python"), "15".to_owned()),
    ]
    .into();
    let objects = vec![kept, edited.clone(), moved.clone(), added.clone()];
    let pass = plan("oi", objects, &applied, &present);
    assert_eq!(
        pass.write,
        [
            (key(POLICY, "oi.shop.node"), edited),
            (key(POLICY, "oi.shop.python"), moved),
            (key(POLICY, "oi.shop.dotnet"), added),
        ]
    );
    assert!(pass.delete.is_empty());
}

#[test]
fn a_pass_after_a_restart_writes_everything_once() {
    // Nothing applied by this process yet (a new Lease holder): every object is written,
    // even one that exists with the same content (its resourceVersion is unknown here).
    let java = object(POLICY, "oi.shop.java", "a");
    let present: Present = [(key(POLICY, "oi.shop.java"), "10".to_owned())].into();
    let pass = plan("oi", vec![java.clone()], &Applied::new(), &present);
    assert_eq!(pass.write, [(key(POLICY, "oi.shop.java"), java)]);
}

#[test]
fn a_pass_deletes_its_own_leftovers_bindings_first_and_nobody_elses() {
    let present: Present = [
        (key(POLICY, "oi.shop.gone"), "1".to_owned()),
        (key(BINDING, "oi.shop.gone"), "2".to_owned()),
        (key(POLICY, "oi.shop.java"), "3".to_owned()),
        // Another prefix, and a name that only starts like ours.
        (key(POLICY, "team.shop.java"), "4".to_owned()),
        (key(POLICY, "oil.shop.java"), "5".to_owned()),
    ]
    .into();
    let java = object(POLICY, "oi.shop.java", "a");
    let applied: Applied = [(key(POLICY, "oi.shop.java"), (java.clone(), "3".to_owned()))].into();
    let pass = plan("oi", vec![java], &applied, &present);
    assert!(pass.write.is_empty());
    assert_eq!(
        pass.delete,
        [key(BINDING, "oi.shop.gone"), key(POLICY, "oi.shop.gone")]
    );
}

#[test]
fn a_render_is_due_first_on_a_spec_change_and_at_the_resync_only() {
    let annotated = |hash: Option<&str>, annotations: &[(&str, &str)]| -> RenderInput {
        RenderInput {
            specs: vec![Spec {
                namespace: "shop".into(),
                name: "java".into(),
                hash: hash.map(|h| h.parse::<crate::crd::SpecHash>().unwrap()),
                annotations: annotations
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            }],
            asking: Vec::new(),
            bound: BTreeSet::new(),
        }
    };
    let spec = |hash: Option<&str>| annotated(hash, &[]);
    let now = Instant::now();
    assert!(due(None, &spec(Some("0a1b2c3d"))));
    let last = (spec(Some("0a1b2c3d")), now);
    // A status write changes no spec.
    assert!(!due(Some(&last), &spec(Some("0a1b2c3d"))));
    assert!(due(Some(&last), &spec(Some("0a1b2c3e"))));
    // Unreadable now.
    assert!(due(Some(&last), &spec(None)));
    // Shared with other namespaces from now on: the binding widens, so the render is due.
    let shared = [(crate::keys::CROSS_NAMESPACE_ANNOTATION, "allowed")];
    assert!(due(Some(&last), &annotated(Some("0a1b2c3d"), &shared)));
    // Its namespace, or any, comes to ask: every pod of it reaches the policies from now on.
    for ns in ["shop", "web"] {
        let mut asks = spec(Some("0a1b2c3d"));
        asks.asking
            .push((ns.into(), vec![crate::agents::Language::Java]));
        assert!(due(Some(&last), &asks), "{ns}");
        // Or asks for another language.
        let was = (asks.clone(), now);
        asks.asking[0].1 = vec![crate::agents::Language::Python];
        assert!(due(Some(&was), &asks), "{ns}");
    }
    // Its namespace comes to carry the policies' labels: its bindings can match from now on.
    let mut labeled = spec(Some("0a1b2c3d"));
    labeled.bound.insert("shop".into());
    assert!(due(Some(&last), &labeled));
    if let Some(then) = now.checked_sub(RESYNC) {
        let old = (spec(Some("0a1b2c3d")), then);
        assert!(due(Some(&old), &spec(Some("0a1b2c3d"))));
    }
}

#[tokio::test]
async fn a_namespace_change_wakes_the_writer_as_an_instrumentation_change_does() {
    use crate::cluster::NamespaceChange;
    use tokio::sync::{broadcast, watch};
    let (inst, inst_rx) = watch::channel(0u64);
    let (ns, ns_rx) = broadcast::channel(4);
    let mut merged = with_namespaces(inst_rx, ns_rx);
    let moved = |merged: &mut watch::Receiver<u64>| {
        let mut merged = merged.clone();
        async move {
            tokio::time::timeout(std::time::Duration::from_secs(5), merged.changed())
                .await
                .is_ok()
        }
    };
    merged.borrow_and_update();
    ns.send(NamespaceChange::Applied("shop".into())).unwrap();
    assert!(moved(&mut merged).await, "a namespace change");
    merged.borrow_and_update();
    inst.send_replace(1);
    assert!(moved(&mut merged).await, "an Instrumentation change");
    merged.borrow_and_update();
    drop(ns);
    // The namespaces' end ends the forwarding: the merged channel closes.
    let closed = tokio::time::timeout(std::time::Duration::from_secs(5), merged.changed()).await;
    assert!(matches!(closed, Ok(Err(_))), "{closed:?}");
}

#[test]
fn a_pass_writes_the_policies_before_any_binding() {
    // The render's order puts each binding after its own policy; the waves put every policy
    // before every binding, whatever the render's order, and keep it within each wave.
    let objects = vec![
        object(BINDING, "oi.shop.java.java", "b"),
        object(POLICY, "oi.shop.java.java", "p"),
        object(
            "ValidatingAdmissionPolicyBinding",
            "oi.warn-not-injected",
            "vb",
        ),
        object(POLICY, "oi.shop.java.python", "p"),
        object("ValidatingAdmissionPolicy", "oi.warn-not-injected", "vp"),
    ];
    let mut pass = plan("oi", objects, &Applied::new(), &Present::new());
    let names = |wave: &[((String, String), Value)]| -> Vec<String> {
        wave.iter()
            .map(|((kind, name), _)| format!("{kind}/{name}"))
            .collect()
    };
    let [policies, bindings] = pass.waves();
    assert_eq!(
        names(&policies),
        [
            "MutatingAdmissionPolicy/oi.shop.java.java",
            "MutatingAdmissionPolicy/oi.shop.java.python",
            "ValidatingAdmissionPolicy/oi.warn-not-injected",
        ]
    );
    assert_eq!(
        names(&bindings),
        [
            "MutatingAdmissionPolicyBinding/oi.shop.java.java",
            "ValidatingAdmissionPolicyBinding/oi.warn-not-injected",
        ]
    );
    assert!(pass.write.is_empty());
}

#[test]
fn a_refused_policy_holds_back_its_own_binding_and_no_other() {
    let binding = |name: &str, policy: &str| {
        let mut b = object(BINDING, name, "b");
        b["spec"]["policyName"] = json!(policy);
        (key(BINDING, name), b)
    };
    let validating = {
        let kind = "ValidatingAdmissionPolicyBinding";
        let mut b = object(kind, "oi.warn-not-injected", "vb");
        b["spec"]["policyName"] = json!("oi.warn-not-injected");
        (key(kind, "oi.warn-not-injected"), b)
    };
    let writes = vec![
        binding("oi.shop.java.java", "oi.shop.java.java"),
        binding("oi.shop.java.python", "oi.shop.java.python"),
        validating.clone(),
    ];
    // The Java policy refused, and a ValidatingAdmissionPolicy of the Python policy's name:
    // another kind's policy, which holds back no MutatingAdmissionPolicyBinding.
    let refused: BTreeSet<(String, String)> = [
        key(POLICY, "oi.shop.java.java"),
        key("ValidatingAdmissionPolicy", "oi.shop.java.python"),
    ]
    .into();
    let kept: Vec<String> = without_bindings_of(writes.clone(), &refused)
        .into_iter()
        .map(|((_, name), _)| name)
        .collect();
    assert_eq!(kept, ["oi.shop.java.python", "oi.warn-not-injected"]);
    // Policies are never held back, and nothing is without a refusal.
    let policies = vec![(
        key(POLICY, "oi.shop.java.java"),
        object(POLICY, "oi.shop.java.java", "p"),
    )];
    assert_eq!(without_bindings_of(policies.clone(), &refused), policies);
    assert_eq!(
        without_bindings_of(writes.clone(), &BTreeSet::new()),
        writes
    );
}
