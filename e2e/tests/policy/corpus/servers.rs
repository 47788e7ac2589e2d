//! The web servers' cases (Apache httpd, nginx): a policy clones the target's configuration
//! as the webhook does, with the target's own fields and the service name quoted as the
//! server reads it; several targets and a mount inside the server's configuration are left
//! to the webhook. With them, the empty variables an agent does not extend as a value
//! (nginx's `LD_LIBRARY_PATH`, Python's `PYTHONPATH`): the agent's part alone.

use otel_injector::keys::{CONTAINER_NAMES, INJECT_APACHE_HTTPD, INJECT_NGINX, INJECT_PYTHON};
use serde_json::{Value, json};

use super::super::build::{container, owned, pod};

/// (case, namespace key, pod), as [`super::corpus`].
pub fn cases() -> Vec<(&'static str, &'static str, Value)> {
    let one = |case: &'static str, ann: Value, c: Value| {
        (case, "shop", pod(case, ann, json!({}), json!([c])))
    };
    let web = |env: Value| container("web", "shop/web:2.4@sha256:89ab", env);
    vec![
        ("apache-cloned", "shop", {
            let mut c = web(json!([{"name": "PORT", "value": "8080"}]));
            c["envFrom"] = json!([{"configMapRef": {"name": "web-settings"}}]);
            c["volumeMounts"] = json!([{"name": "static", "mountPath": "/var/www"}]);
            c["imagePullPolicy"] = json!("Always");
            c["securityContext"] = json!({"runAsUser": 33, "allowPrivilegeEscalation": false});
            let mut p = pod(
                "apache-cloned",
                json!({INJECT_APACHE_HTTPD: "java"}),
                json!({}),
                json!([c]),
            );
            p["spec"]["volumes"] = json!([{"name": "static", "emptyDir": {}}]);
            p["spec"]["initContainers"] = json!([{"name": "warm", "image": "shop/warm:1"}]);
            p
        }),
        // A Deployment's pod: the service name in the module configuration is the
        // Deployment's, as in OTEL_SERVICE_NAME.
        (
            "apache-deployment",
            "shop",
            owned(
                pod(
                    "apache-deployment",
                    json!({INJECT_APACHE_HTTPD: "java"}),
                    json!({}),
                    json!([web(json!([]))]),
                ),
                "ReplicaSet",
                "storefront-5d8f7c9b6",
                Some("5d8f7c9b6"),
            ),
        ),
        one(
            "nginx-quoted-service",
            json!({INJECT_NGINX: "langs", "resource.opentelemetry.io/service.name": "shop front;\"v2\""}),
            web(json!([{"name": "LD_LIBRARY_PATH", "value": "/usr/lib/extra"}])),
        ),
        ("edge-nginx-two-targets", "shop", {
            pod(
                "edge-nginx-two-targets",
                json!({INJECT_NGINX: "java", CONTAINER_NAMES: "a,b"}),
                json!({}),
                json!([
                    web(json!([])),
                    container("a", "shop/a:1", json!([])),
                    container("b", "shop/b:1", json!([]))
                ]),
            )
        }),
        // The target's own mounts of the server's configuration: taken over by the clone
        // (the engine's and the policy's), the others kept in their order.
        ("apache-conf-mount", "shop", {
            let mut c = web(json!([]));
            c["volumeMounts"] =
                json!([{"name": "extra", "mountPath": "/usr/local/apache2/conf/extra"}]);
            let mut p = pod(
                "apache-conf-mount",
                json!({INJECT_APACHE_HTTPD: "java"}),
                json!({}),
                json!([c]),
            );
            p["spec"]["volumes"] = json!([{"name": "extra", "emptyDir": {}}]);
            p
        }),
        ("nginx-conf-mount", "shop", {
            let mut c = web(json!([]));
            c["volumeMounts"] = json!([
                {"name": "data", "mountPath": "/data"},
                {"name": "conf", "mountPath": "/etc/nginx/"},
                {"name": "sites", "mountPath": "/etc/nginx/sites-enabled"},
                {"name": "data", "mountPath": "/var/log/nginx", "subPath": "logs"},
            ]);
            let mut p = pod(
                "nginx-conf-mount",
                json!({INJECT_NGINX: "java"}),
                json!({}),
                json!([c]),
            );
            p["spec"]["volumes"] = json!([
                {"name": "data", "emptyDir": {}},
                {"name": "conf", "emptyDir": {}},
                {"name": "sites", "emptyDir": {}},
            ]);
            p
        }),
        one(
            "nginx-empty-library-path",
            json!({INJECT_NGINX: "java"}),
            web(json!([{"name": "LD_LIBRARY_PATH"}])),
        ),
        one(
            "python-empty-pythonpath",
            json!({INJECT_PYTHON: "langs"}),
            web(json!([{"name": "PYTHONPATH"}])),
        ),
    ]
}
