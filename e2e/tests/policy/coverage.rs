//! The policies against the webhook, in each delivery: the same stored pods where they cover
//! the pod; the others left to the webhook, or in mode `policy` marked with its outcome.

use std::time::{Duration, Instant};

use clap::ValueEnum;
use futures::StreamExt as _;
use serde_json::{Value, json};

use crate::harness::{self, Env, Options, SCOPE_LABEL, cluster};
use crate::support::api;

use super::corpus::{corpus_in, instrumentations};
use super::{
    POLICY_SCOPE, corpus_namespaces, create_all, create_each, create_instrumentations, delete_all,
    delete_each, explained_paths, injected_java, render, until,
};
use otel_injector::engine::outcome::{Outcome, PodStatus};
use otel_injector::engine::{AgentDelivery, SkipReason};
use otel_injector::keys::{INJECTED_ANNOTATION, INJECTED_LABEL, STATUS_ANNOTATION};

/// Item 2 of the issue: every pod a policy injects is stored exactly as the webhook (image
/// volumes) stores it; every other one is left untouched by the policies and served by the
/// webhook when both run.
#[tokio::test]
async fn policies_store_exactly_the_webhooks_pods_and_leave_the_rest_to_it() {
    differential("diff", AgentDelivery::ImageVolume).await;
}

/// The same in init-container delivery (the flag's default): the policies add the agent's
/// init container (the target's security context copied in) and its emptyDir, exactly as
/// the webhook does.
#[tokio::test]
async fn in_init_container_delivery_too() {
    differential("copy", AgentDelivery::InitContainer).await;
}

/// The five phases over the corpus, with `--agent-delivery=<kind>` for the webhook and the
/// policies alike; `tag` names the run's namespaces, scope and objects.
async fn differential(tag: &str, kind: AgentDelivery) {
    let name = kind.to_possible_value().expect("a delivery");
    let delivery = format!("--agent-delivery={}", name.get_name());
    let env = Env::start_with(
        &format!("policy-{tag}"),
        Options {
            args: vec![delivery.clone()],
            ..Options::default()
        },
    )
    .await;
    let cp = cluster().await;
    let client = env.client.clone();
    // In the webhook's scope for phase 1 only.
    let (solo, shop) = (
        format!("e2e-policy-{tag}-solo"),
        format!("e2e-policy-{tag}-shop"),
    );
    let (solo, shop) = (solo.as_str(), shop.as_str());
    corpus_namespaces(
        &client,
        solo,
        shop,
        &[(POLICY_SCOPE, tag), (SCOPE_LABEL, &env.id)],
    )
    .await;
    let asked = super::corpus::asked_namespace(shop);
    let asked = asked.as_str();
    label_solo(&client, solo).await;
    let insts = instrumentations(solo, shop);
    create_instrumentations(&client, &insts).await;
    let pods = corpus_in(solo, shop);
    let probe = pods
        .iter()
        .find(|p| p.0 == "java-named")
        .expect("a case")
        .clone();
    let injected = injected_java;

    // 1. The webhook alone.
    env.await_webhook(shop).await;
    env.until_dry_run(&probe.1, &probe.2, "the webhook's injection", |r| {
        injected(&r.body)
    })
    .await;
    let by_webhook = create_each(&client, &pods).await;
    delete_each(&client, &pods).await;
    let set_scope = |value: Option<String>| {
        let client = client.clone();
        async move {
            for ns in [solo, shop, asked] {
                let patch = json!({"metadata": {"labels": {SCOPE_LABEL: value}}});
                let r = api::merge_patch(&client, &format!("/api/v1/namespaces/{ns}"), &patch)
                    .await
                    .unwrap_or_else(|e| panic!("{e}"));
                assert_eq!(r.status, 200, "{}", r.body);
            }
        }
    };
    set_scope(None).await;
    until(
        &client,
        &probe.1,
        &probe.2,
        "the webhook out of scope",
        |p| !injected(p),
    )
    .await;

    // 2. The policies alone.
    let (objects, coverage) = render(
        &cp.dir,
        &insts,
        &[
            "--mode",
            "both",
            "--name-prefix",
            &format!("e2e-{tag}"),
            &format!("--namespace-label={POLICY_SCOPE}={tag}"),
            &delivery,
        ],
    );
    eprintln!("[e2e] policy coverage:\n{coverage}");
    assert!(
        coverage.contains(&format!("{shop}/tls: policy injects java,")),
        "{coverage}"
    );
    create_all(&client, &objects).await;
    until(
        &client,
        &probe.1,
        &probe.2,
        "the policy's injection",
        injected,
    )
    .await;
    // Every case but the edges and those that do not ask: what the policies must inject.
    let expected: Vec<&str> = pods
        .iter()
        .map(|p| p.0)
        .filter(|c| !c.starts_with("edge-") && !["not-asked", "asked-false"].contains(c))
        .collect();
    let by_policy = created_alone(&env, &pods, injects_exactly(&pods, &expected)).await;

    let mut covered = Vec::new();
    let mut left = Vec::new();
    for (((case, _, sent), policy), webhook) in pods.iter().zip(&by_policy).zip(&by_webhook) {
        if injected_now(policy, sent) {
            assert_eq!(
                policy, webhook,
                "{case}: the policy's pod differs from the webhook's"
            );
            covered.push(*case);
        } else {
            // Untouched: what was sent, plus the API server's defaults.
            harness::assert_stored_as_expected(policy, sent);
            left.push(*case);
        }
    }
    eprintln!(
        "[e2e] covered by the policies ({}): {covered:?}",
        covered.len()
    );
    eprintln!("[e2e] left to the webhook ({}): {left:?}", left.len());
    let by_webhook_alone = pods
        .iter()
        .zip(&by_webhook)
        .filter(|((_, _, sent), w)| injected_now(w, sent))
        .count();
    let webhook_only: Vec<&str> = pods
        .iter()
        .zip(&by_webhook)
        .filter(|((case, _, sent), w)| injected_now(w, sent) && !covered.contains(case))
        .map(|((case, _, _), _)| *case)
        .collect();
    eprintln!(
        "[e2e] injected by the webhook only ({}): {webhook_only:?}",
        webhook_only.len()
    );
    eprintln!(
        "[e2e] share of the pods the webhook injects that the policies cover: {}/{by_webhook_alone} ({:.1} %)",
        covered.len(),
        100.0 * covered.len() as f64 / by_webhook_alone.max(1) as f64
    );
    let edges: Vec<&&str> = covered.iter().filter(|c| c.starts_with("edge-")).collect();
    assert!(
        edges.is_empty(),
        "edges a policy must leave to the webhook: {edges:?}"
    );
    assert_eq!(covered, expected, "the corpus cases a policy serves");
    // `explain` names the path the API server took: the policy for every pod it injected,
    // the webhook for every other pod the webhook injected.
    let paths = explained_paths(&cp.dir, &cp.kubeconfig, &pods, &delivery);
    for (((case, _, sent), path), webhook) in pods.iter().zip(&paths).zip(&by_webhook) {
        let want = if covered.contains(case) {
            Some("policy")
        } else if injected_now(webhook, sent) {
            Some("webhook")
        } else {
            None
        };
        assert_eq!(path.as_deref(), want, "{case}: the path explain names");
    }

    // 3. Both: the policies inject what they cover and the webhook leaves those pods alone
    // (they carry its marker); it injects the rest.
    set_scope(Some(env.id.clone())).await;
    env.await_webhook(shop).await;
    let by_both = create_each(&client, &pods).await;
    for (((case, _, _), both), webhook) in pods.iter().zip(&by_both).zip(&by_webhook) {
        assert_eq!(both, webhook, "{case}: with both paths");
    }
    delete_each(&client, &pods).await;
    delete_all(&client, &objects).await;

    // 4. Live policies alone (a policy per language, reached by the pods whose keys, or whose
    // namespace's keys, ask for it), rendered as the writer renders them from its caches: the
    // very pods the CLI's policies inject, each stored as the webhook stores it; the others
    // left as sent.
    set_scope(None).await;
    until(&client, &probe.1, &probe.2, "nothing injecting", |p| {
        !injected(p)
    })
    .await;
    let live = live_corpus_render(&client, &insts, &[solo, shop, asked], tag, kind).await;
    create_all(&client, &live).await;
    let by_live = created_alone(&env, &pods, injects_exactly(&pods, &covered)).await;
    let mut live_covered = Vec::new();
    for (((case, _, sent), live), webhook) in pods.iter().zip(&by_live).zip(&by_webhook) {
        if injected_now(live, sent) {
            assert_eq!(live, webhook, "{case}: the live policies' pod differs");
            live_covered.push(*case);
        } else {
            harness::assert_stored_as_expected(live, sent);
        }
    }
    assert_eq!(
        live_covered, covered,
        "the corpus cases live policies serve"
    );
    delete_all(&client, &live).await;
    until(&client, &probe.1, &probe.2, "nothing injecting", |p| {
        !injected(p)
    })
    .await;

    // 5. Mode policy, no webhook: every pod a policy injects is the webhook's; every other
    // pod the webhook injects or skips is marked skipped with the Instrumentation the webhook
    // names (and the webhook's reason where it skipped too); the rest are left as sent.
    let (alone, _) = render(
        &cp.dir,
        &insts,
        &[
            "--mode",
            "policy",
            "--name-prefix",
            &format!("e2e-{tag}-alone"),
            &format!("--namespace-label={POLICY_SCOPE}={tag}"),
            &delivery,
        ],
    );
    create_all(&client, &alone).await;
    // Settled: the pods a policy covers injected (the status policy marks the others, and
    // marks a pod skipped while its injection policy is not in effect yet), and every pod the
    // webhook marks marked.
    let by_mode_policy = created_alone(&env, &pods, |i, answer| {
        let (case, _, sent) = &pods[i];
        let marked = |p: &Value| p["metadata"]["annotations"][STATUS_ANNOTATION].is_string();
        if covered.contains(case) {
            injected_now(answer, sent)
        } else {
            marked(answer) == marked(&by_webhook[i])
        }
    })
    .await;
    let mut differs = Vec::new();
    for (((case, _, sent), policy), webhook) in pods.iter().zip(&by_mode_policy).zip(&by_webhook) {
        if covered.contains(case) {
            assert_eq!(policy, webhook, "{case}: mode policy");
            continue;
        }
        let status = |p: &Value| -> Option<PodStatus> {
            let s = p["metadata"]["annotations"][STATUS_ANNOTATION].as_str()?;
            Some(s.parse().unwrap_or_else(|e| panic!("{case}: {s}: {e:?}")))
        };
        let Some(by_webhook) = status(webhook) else {
            harness::assert_stored_as_expected(policy, sent);
            continue;
        };
        assert_eq!(
            policy["metadata"]["labels"][INJECTED_LABEL], "false",
            "{case}"
        );
        // What the webhook did, as a skip: a language it injected is the policies' to leave.
        let expected = PodStatus {
            entries: by_webhook
                .entries
                .into_iter()
                .map(|mut e| {
                    if let Outcome::Injected {
                        instrumentation, ..
                    } = e.outcome
                    {
                        e.outcome = Outcome::Skipped {
                            reason: SkipReason::PolicyUnsupported,
                            instrumentation: Some(instrumentation),
                        };
                    }
                    e
                })
                .collect(),
        };
        let marked = status(policy).map(|s| s.to_string());
        if marked.as_deref() != Some(expected.to_string().as_str()) {
            differs.push(format!("{case}: {marked:?}, the webhook's: {expected}"));
        }
    }
    assert!(differs.is_empty(), "mode policy's skips: {differs:#?}");
    delete_all(&client, &alone).await;
}

/// The corpus created with the policies alone (the webhook out of scope, and not called),
/// once the policies have taken effect: the API server's informer takes each new policy in
/// its own time, so every pod is dry-run until each answer is what the phase expects of it
/// (`ready`, given the case's index), at most [`SETTLE`]. Past that the pods are created
/// anyway, and the phase's assertions say which differ.
async fn created_alone(
    env: &Env,
    pods: &[(&'static str, String, Value)],
    ready: impl Fn(usize, &Value) -> bool,
) -> Vec<Value> {
    let client = &env.client;
    let t0 = Instant::now();
    loop {
        let answers = dry_run_each(client, pods).await;
        let waiting: Vec<&str> = answers
            .iter()
            .enumerate()
            .filter(|(i, answer)| !ready(*i, answer))
            .map(|(i, _)| pods[i].0)
            .collect();
        if waiting.is_empty() {
            break;
        }
        if t0.elapsed() >= SETTLE {
            eprintln!("[e2e] not as expected {SETTLE:?} after the policies: {waiting:?}");
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    eprintln!(
        "[e2e] the policies took effect for every case in {:?}",
        t0.elapsed()
    );
    let requests_before = env.requests().await.total();
    let stored = create_each(client, pods).await;
    delete_each(client, pods).await;
    assert_eq!(
        env.requests().await.total(),
        requests_before,
        "the webhook was called"
    );
    stored
}

/// [`created_alone`]'s readiness where exactly `cases` are injected.
fn injects_exactly<'a>(
    pods: &'a [(&'static str, String, Value)],
    cases: &'a [&'a str],
) -> impl Fn(usize, &Value) -> bool + 'a {
    move |i, answer| {
        let (case, _, sent) = &pods[i];
        injected_now(answer, sent) == cases.contains(case)
    }
}

/// How long [`created_alone`] waits for the policies to take effect.
const SETTLE: Duration = Duration::from_secs(60);

/// The answers to a dry-run create of each of `pods`, in order (eight at once).
async fn dry_run_each(client: &kube::Client, pods: &[(&'static str, String, Value)]) -> Vec<Value> {
    futures::stream::iter(pods)
        .map(|(case, ns, p)| async move {
            let r = api::create_pod(client, ns, p, true)
                .await
                .unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(r.status, 201, "{case}: {}", r.body);
            r.body
        })
        .buffered(8)
        .collect()
        .await
}

/// Whether `stored` was injected on its way in (a pod injected before carries the marker as
/// `sent`).
fn injected_now(stored: &Value, sent: &Value) -> bool {
    let marked = |p: &Value| p["metadata"]["annotations"][INJECTED_ANNOTATION].is_string();
    marked(stored) && !marked(sent)
}

/// Labels the `solo` namespace as the generated cases need (`keys.rs`).
async fn label_solo(client: &kube::Client, solo: &str) {
    let labels: serde_json::Map<String, Value> = super::keys::namespace_labels()
        .into_iter()
        .map(|(k, v)| (k, json!(v)))
        .collect();
    let patch = json!({"metadata": {"labels": labels}});
    let r = api::merge_patch(client, &format!("/api/v1/namespaces/{solo}"), &patch)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.status, 200, "{}", r.body);
}

/// The corpus's policies as live policies render them (`PolicyOptions::namespaces_read`, mode
/// both, names prefixed `e2e-<tag>-live`, bound where [`POLICY_SCOPE`] is `tag`), from the
/// `namespaces` as the API server holds them, as the writer's cache holds them.
async fn live_corpus_render(
    client: &kube::Client,
    insts: &[Value],
    namespaces: &[&str],
    tag: &str,
    delivery: AgentDelivery,
) -> Vec<Value> {
    use otel_injector::cluster::StaticCatalog;
    use otel_injector::cluster::watch::NamespaceEntry;
    use otel_injector::engine::EngineConfig;
    use otel_injector::policy::{Form, Mode, PolicyOptions};
    let typed = insts
        .iter()
        .map(|i| serde_json::from_value(i.clone()).expect("an Instrumentation"));
    let mut catalog = StaticCatalog::new(typed);
    let empty = Default::default();
    for ns in namespaces {
        let stored = api::get_namespace(client, ns)
            .await
            .unwrap_or_else(|e| panic!("{e}"))
            .unwrap_or_else(|| panic!("namespace {ns} not found"));
        let meta = serde_json::from_value(stored["metadata"].clone()).expect("metadata");
        let (name, entry) = NamespaceEntry::of(meta, &empty);
        catalog = catalog.with_namespace_info(&name, (*entry.info).clone());
    }
    let config = EngineConfig {
        delivery,
        ..EngineConfig::default()
    };
    let options = PolicyOptions {
        mode: Mode::Both,
        form: Form::Live,
        prefix: format!("e2e-{tag}-live"),
        namespace_labels: vec![(POLICY_SCOPE.into(), tag.into())],
        namespaces_read: true,
        ..PolicyOptions::default()
    };
    let objects = otel_injector::policy::render(&catalog, &config, &options).objects;
    // A policy per language where a key must ask (no selector among the corpus's
    // Instrumentations).
    let keyed = objects
        .iter()
        .filter(|o| o["kind"] == "MutatingAdmissionPolicy")
        .filter(|o| {
            o["spec"]["matchConditions"][0]["name"]
                .as_str()
                .is_some_and(|n| n.starts_with("asks-for-"))
        })
        .count();
    assert!(keyed > 7, "{keyed} policies per language");
    objects
}
