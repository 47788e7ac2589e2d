//! The safety net through the real control plane: Deployments whose pods the real controller
//! manager makes and the webhook injects, on a kwok node whose `pod-crash-with-agent` stage
//! (`e2e/kwok/kwok.yaml`) makes an app crash only when it was injected. With
//! `--detect-failures` the status controller tells the failing workload from the healthy one:
//! `status.failing`, the workload's count, the `Failing` condition with the container's last
//! termination reason, one Warning `InstrumentedPodsFailing` Event on the Deployment, the
//! metric, and the `FAILING` column of `kubectl get otelinst`.

mod kinds;
mod policy;
mod rollback;

use otel_injector::keys::INJECT_JAVA;
use std::time::{Duration, Instant};

use rollback::{marker, rolled_back_pod};
use serde_json::{Value, json};

use crate::harness::{Env, Options, Rbac, cluster, is_injected};
use crate::status::deployment;
use crate::status::get;
use crate::support::api::{self, instrumentation_path};
use crate::support::chart;
use crate::support::identity::NAMESPACE;
use crate::support::webhook;
use crate::workloads::{running_pods, template};

/// The kwok stage's label: the pod crashes with this termination reason when injected.
const CRASH_WITH_AGENT: &str = "e2e.otel-injector.io/crash-with-agent";

/// The Events of `reason` in a namespace, as `[type, regarding kind, regarding name, note]`,
/// once there is one (at most 10 s: the worker publishes them after the status pass).
async fn events_of(env: &Env, ns: &str, reason: &str) -> Vec<Value> {
    let t0 = Instant::now();
    loop {
        let list = get(
            env,
            &format!("/apis/events.k8s.io/v1/namespaces/{ns}/events"),
        )
        .await;
        let events: Vec<Value> = list["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|e| e["reason"] == reason)
            .map(|e| {
                json!([
                    e["type"],
                    e["regarding"]["kind"],
                    e["regarding"]["name"],
                    e["note"]
                ])
            })
            .collect();
        if !events.is_empty() || t0.elapsed() > Duration::from_secs(10) {
            return events;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A webhook with the status controller and `flags`, alone in the cluster (the status
/// controller writes every Instrumentation's status), its namespace `id-id` watched.
async fn start(id: &str, rbac: Rbac, flags: &[&str]) -> (Env, String) {
    let mut args: Vec<String> = [
        "--status=true",
        "--events=true",
        "--lease-name=otel-injector",
        "--lease-duration=3s",
    ]
    .map(String::from)
    .to_vec();
    args.push(format!("--lease-identity={id}-a"));
    args.push(format!("--lease-namespace={NAMESPACE}"));
    args.extend(flags.iter().map(|f| f.to_string()));
    let env = Env::start_with(
        id,
        Options {
            rbac,
            exclusive: true,
            args,
            ..Options::default()
        },
    )
    .await;
    let ns = env.namespace(id, &[]).await;
    env.await_webhook(&ns).await;
    (env, ns)
}

#[tokio::test]
async fn a_workload_failing_only_with_the_agent_is_detected_and_a_healthy_one_is_not() {
    let (env, ns) = start("safety", Rbac::Missed, &["--detect-failures=true"]).await;
    env.instrumentation(
        &ns,
        "java",
        json!({"exporter": {"endpoint": "http://collector.example:4318"}}),
    )
    .await;
    let mut crashy = template("crashy", &[(INJECT_JAVA, "true")]);
    crashy["metadata"]["labels"][CRASH_WITH_AGENT] = json!("OOMKilled");
    let fine = template("fine", &[(INJECT_JAVA, "true")]);
    let mut probe = json!({"apiVersion": "v1", "kind": "Pod",
                           "metadata": crashy["metadata"].clone(), "spec": crashy["spec"].clone()});
    probe["metadata"]["name"] = json!("crashy-dry-run");
    env.until_dry_run(&ns, &probe, "injection", |r| is_injected(&r.body))
        .await;
    deployment(&env, &ns, "crashy", 1, crashy).await;
    deployment(&env, &ns, "fine", 1, fine).await;
    let crashing = running_pods(&env, &ns, "app=crashy", 1, Duration::from_secs(60)).await;
    let t0 = Instant::now();
    let pod = crashing[0]["metadata"]["name"].as_str().unwrap().to_owned();
    assert_eq!(
        crashing[0]["status"]["containerStatuses"][0]["lastState"]["terminated"]["reason"],
        "OOMKilled",
        "the kwok stage crashed the injected pod"
    );
    let healthy = running_pods(&env, &ns, "app=fine", 1, Duration::from_secs(60)).await;
    assert_eq!(healthy[0]["status"]["containerStatuses"][0]["ready"], true);

    // Detected: counted, named in the condition, the failing workload first.
    let status = loop {
        let status = get(&env, &instrumentation_path(&ns, "java")).await["status"].clone();
        if status["failing"] == 1 && status["injected"] == 2 {
            break status;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "failing counted within 30 s: {status}\n{}",
            env.webhook.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let detected = t0.elapsed();
    let workloads: Vec<Value> = status["workloads"]
        .as_array()
        .expect("workloads")
        .iter()
        .map(|w| json!([w["name"], w["injected"], w["failing"]]))
        .collect();
    assert_eq!(
        workloads,
        [json!(["crashy", 1, 1]), json!(["fine", 1, null])]
    );
    let failing = status["conditions"]
        .as_array()
        .expect("conditions")
        .iter()
        .find(|c| c["type"] == "Failing")
        .cloned()
        .expect("a Failing condition");
    let why = format!(
        "Deployment {ns}/crashy: pod {pod} container app: OOMKilled (exit code 137), 4 restarts"
    );
    assert_eq!(
        json!([failing["status"], failing["reason"], failing["message"]]),
        json!([
            "True",
            "WorkloadsFailing",
            format!("pods injected with the current spec are failing: {why}")
        ])
    );

    // Announced once, on the Deployment; the healthy one is never named.
    assert_eq!(
        events_of(&env, &ns, "InstrumentedPodsFailing").await,
        [json!([
            "Warning",
            "Deployment",
            "crashy",
            format!(
                "1 pod(s) of Deployment/{ns}/crashy injected with the current spec of \
                 Instrumentation {ns}/java are failing: pod {pod} container app: OOMKilled \
                 (exit code 137), 4 restarts"
            )
        ])]
    );
    // Cluster-wide: other tests' crash-looping workloads (the rollout's) count too.
    let gauge = webhook::metric(
        &env.webhook.metrics().await,
        "otel_injector_status_failing_workloads",
    );
    assert!(gauge.is_some_and(|g| g >= 1.0), "{gauge:?}");

    // `kubectl get otelinst` shows it.
    let cp = cluster().await;
    let out = chart::kubectl(cp, &["get", "otelinst", "-n", &ns]).unwrap_or_else(|e| panic!("{e}"));
    assert!(out.ok, "{}", out.stderr);
    eprintln!(
        "[e2e] failing detected {detected:?} after the crashing pod ran; kubectl get otelinst -n {ns}:\n{}",
        out.stdout
    );
    let lines: Vec<Vec<&str>> = out
        .stdout
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        lines[0][lines[0].len() - 3..],
        ["FAILING", "ROLLED", "BACK"],
        "{}",
        out.stdout
    );
    assert_eq!(lines[1][lines[1].len() - 5..], ["2", "0", "0", "0", "1"]);
}

/// The acceptance test through the pod runner: a real Java app whose agent is broken (an
/// agent image whose `javaagent.jar` is not a jar) exits non-zero when injected. The test
/// plays the kubelet's part the runner does not (restarts): it reports the real exit as the
/// container's last termination after three restarts. The safety net rolls the Deployment
/// back and its next pod, run by the runner without the agent, serves.
#[tokio::test]
async fn a_real_app_that_fails_with_a_broken_agent_comes_back_serving_without_it() {
    use crate::support::process::free_port;
    use crate::support::runner::{self, Image};
    use crate::telemetry::{self, Running};

    let (env, ns) = start("broken", Rbac::SafetyNet, &["--rollback=true"]).await;
    let cp = cluster().await;
    let broken = "e2e.local/broken-java-agent:1";
    let mut images = telemetry::images();
    let agent_dir = tempfile::tempdir_in(&cp.dir).expect("a temp dir");
    std::fs::write(agent_dir.path().join("javaagent.jar"), b"not a jar").expect("write");
    images.0.insert(
        broken.into(),
        Image {
            root: agent_dir.path().to_owned(),
            entrypoint: Vec::new(),
            cmd: Vec::new(),
            env: vec![("PATH".into(), "/usr/bin:/bin".into())],
            workdir: "/".into(),
        },
    );
    let inst = json!({"apiVersion": "opentelemetry.io/v1alpha1", "kind": "Instrumentation",
        "metadata": {"name": "java", "annotations": {"otel-injector/on-failure": "rollback"}},
        "spec": {"exporter": {"endpoint": "http://127.0.0.1:4318"}, "java": {"image": broken}}});
    let r = api::create_instrumentation(&env.client, &ns, &inst)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.status, 201, "{}", r.body);
    let port = free_port();
    let mut t = template("shop", &[(INJECT_JAVA, "true")]);
    t["spec"]["containers"] = json!([telemetry::app("app", runner::JAVA_APP, port)]);
    let mut probe = json!({"apiVersion": "v1", "kind": "Pod",
                           "metadata": t["metadata"].clone(), "spec": t["spec"].clone()});
    probe["metadata"]["name"] = json!("shop-dry-run");
    env.until_dry_run(&ns, &probe, "injection", |r| is_injected(&r.body))
        .await;
    deployment(&env, &ns, "shop", 1, t).await;
    let pod = running_pods(&env, &ns, "app=shop", 1, Duration::from_secs(60))
        .await
        .remove(0);
    assert!(is_injected(&pod), "{}", pod["metadata"]);

    // The real app, with the broken agent: the JVM exits non-zero.
    let mut run = runner::run(&env.client, &pod, &images, &cp.dir)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let t0 = Instant::now();
    let code = loop {
        if let Some(st) = run.containers.get_mut("app").and_then(|c| c.exited()) {
            break st.code().expect("an exit code");
        }
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "the app with a broken agent still runs:\n{}",
            run.logs()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_ne!(code, 0, "{}", run.log("app"));
    let log = run.log("app");
    eprintln!(
        "[e2e] broken agent: the app exited {code}: {}",
        log.lines().next().unwrap_or("")
    );
    drop(run);
    // As the kubelet reports it after restarting it three times.
    let name = pod["metadata"]["name"].as_str().unwrap().to_owned();
    let status = json!({"status": {"containerStatuses": [{
        "name": "app", "image": runner::JAVA_APP, "imageID": "", "ready": false, "started": false,
        "restartCount": 3,
        "state": {"waiting": {"reason": "CrashLoopBackOff"}},
        "lastState": {"terminated": {"exitCode": code, "reason": "Error"}},
    }]}});
    let r = api::merge_patch(
        &env.client,
        &format!("/api/v1/namespaces/{ns}/pods/{name}/status"),
        &status,
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.status, 200, "{}", r.body);
    let t1 = Instant::now();

    // Rolled back; the next pod, without the agent, really serves.
    // The spec the pod was injected with: `java=injected <ns>/java <spec>`.
    let spec = pod["metadata"]["annotations"]["otel-injector/status"]
        .as_str()
        .and_then(|s| s.rsplit(' ').next())
        .expect("the outcome")
        .to_owned();
    assert_eq!(
        marker(&env, &ns, "shop", Duration::from_secs(30)).await,
        format!("java={spec}")
    );
    let healthy = rolled_back_pod(&env, &ns, "shop", Duration::from_secs(60)).await;
    let rolled = t1.elapsed();
    let run = runner::run(&env.client, &healthy, &images, &cp.dir)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let mut r = Running {
        ns: ns.clone(),
        pod: healthy.clone(),
        run,
    };
    let (code, _) = telemetry::request(&mut r, port, "/checkout").await;
    assert_eq!(code, 200);
    assert!(
        !r.run.envs["app"]
            .iter()
            .any(|(k, _)| k == "JAVA_TOOL_OPTIONS"),
        "no agent: {:?}",
        r.run.envs["app"]
    );
    let rolled_back = get(&env, &instrumentation_path(&ns, "java")).await["status"]["rolledBack"]
        [0]["reason"]
        .clone();
    assert_eq!(
        rolled_back,
        format!(
            "pod {name} container app: Error (exit code {code_}), 3 restarts",
            code_ = status["status"]["containerStatuses"][0]["lastState"]["terminated"]["exitCode"]
        )
    );
    eprintln!(
        "[e2e] broken agent: rolled back to a serving pod without the agent {rolled:?} after the failure was reported"
    );
}
