//! The templates of init-container delivery: the engine's init containers, replayed.

use serde_json::json;

use super::{JAVA, inst, names};
use crate::agents::Language;
use crate::engine::EngineConfig;
use crate::policy::template;

#[test]
fn init_container_delivery_adds_the_engines_init_containers_with_the_targets_security() {
    // The flag's default, as the webhook's: the agent copied by an init container.
    let t = template::read(&inst(JAVA), Language::Java, &EngineConfig::default()).unwrap();
    assert_eq!(
        t.volumes,
        [
            json!({"name": "opentelemetry-auto-instrumentation-java", "emptyDir": {"sizeLimit": "200Mi"}})
        ]
    );
    assert_eq!(
        t.init_containers,
        [json!({
            "name": "opentelemetry-auto-instrumentation-java",
            "image": crate::agents::java::DEFAULT_IMAGE,
            "command": ["cp", "/javaagent.jar", "/otel-auto-instrumentation-java/javaagent.jar"],
            "resources": {
                "limits": {"cpu": "500m", "memory": "256Mi"},
                "requests": {"cpu": "50m", "memory": "64Mi"},
            },
            "volumeMounts": [{
                "name": "opentelemetry-auto-instrumentation-java",
                "mountPath": "/otel-auto-instrumentation-java",
            }],
        })]
    );
    // No initContainerSecurityContext: the first target's is copied in.
    assert!(t.init_security_from_target);
    // One of its own: written in the template, the target's is not read.
    let own = JAVA.replace(
        "  java:\n",
        "  initContainerSecurityContext: {runAsUser: 1000}\n  java:\n",
    );
    let t = template::read(&inst(&own), Language::Java, &EngineConfig::default()).unwrap();
    assert!(!t.init_security_from_target);
    assert_eq!(
        t.init_containers[0]["securityContext"],
        json!({"runAsUser": 1000})
    );
    // Java's extensions: one more init container each, after the agent's.
    let ext = JAVA.replace(
        "  java:\n",
        "  java:\n    extensions: [{image: \"ext:1\", dir: /ext}]\n",
    );
    let t = template::read(&inst(&ext), Language::Java, &EngineConfig::default()).unwrap();
    let names: Vec<&str> = names(&t.init_containers);
    assert_eq!(
        names,
        [
            "opentelemetry-auto-instrumentation-java",
            "opentelemetry-auto-instrumentation-extension-0"
        ]
    );
    assert!(t.init_security_from_target);
}
