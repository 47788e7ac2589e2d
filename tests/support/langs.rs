//! The languages as the table tests see them: the annotation that asks for each, the
//! Instrumentation its cases use (`tests/data/instrumentations/`), and, for the languages that
//! edit their targets' own env (the copy agents and `inject-sdk`), what a target gets.

use std::ops::Deref;

use otel_injector::agents::Language;
use otel_injector::cluster::StaticCatalog;
use otel_injector::keys::{
    INJECT_APACHE_HTTPD, INJECT_DOTNET, INJECT_GO, INJECT_JAVA, INJECT_NGINX, INJECT_NODEJS,
    INJECT_PYTHON, INJECT_SDK,
};
use serde_json::{Value, json};

use super::{
    GRPC_SDK, HTTP_SDK, Sdk, agent_init, agent_mount, agent_mount_at, agent_volume, annotated_pod,
    app_pod, catalog, env, head, lit,
};

/// One language, as a pod asks for it.
pub struct Lang {
    pub language: Language,
    /// Its name in warnings and in the injected-languages annotation.
    pub name: &'static str,
    /// The annotation that asks for it.
    pub inject: &'static str,
    /// The Instrumentation (in `shop`) its cases use.
    pub shop: &'static str,
}

impl Lang {
    pub fn catalog(&self) -> StaticCatalog {
        catalog(self.shop)
    }

    /// A pod `p` with one container `app` (image `app`, no env) and `inject` set to `value`.
    pub fn asking(&self, value: &str) -> Value {
        json!({
            "metadata": {"name": "p", "annotations": {self.inject: value}},
            "spec": {"containers": [{"name": "app", "image": "app"}]}
        })
    }

    /// [`annotated_pod`] for this language.
    pub fn pod(&self, annotations: Value, spec: Value) -> Value {
        annotated_pod(self.inject, annotations, spec)
    }

    /// [`app_pod`] for this language.
    pub fn app_pod(&self, annotations: Value, env: Value) -> Value {
        app_pod(self.inject, annotations, env)
    }
}

/// A language that edits its targets' own env (the copy agents, Java, Node.js, Python and
/// .NET, and `inject-sdk`): what a target gets from [`Lang::shop`].
pub struct EnvLang {
    pub lang: Lang,
    /// The SDK settings of the Instrumentation.
    pub sdk: Sdk,
    /// What target `container` gets between its own env and the SDK block (when it set none of
    /// it): the language's env, spec.env and the agent's variables, in order.
    pub env: fn(&str) -> Vec<Value>,
    /// The init container that copies the agent, with a security context (none for the SDK).
    pub init: Option<fn(Option<Value>) -> Value>,
    /// The mount of the agent in a target (none for the SDK).
    pub mount: Option<fn(&str) -> Value>,
}

impl Deref for EnvLang {
    type Target = Lang;
    fn deref(&self) -> &Lang {
        &self.lang
    }
}

impl EnvLang {
    /// `container` as a target of pod `service` whose image has tag `version`: the variables
    /// put before its own env, its env, the language's variables and the SDK block; its
    /// mounts and the agent's.
    pub fn instrumented(&self, container: &Value, service: &str, version: Option<&str>) -> Value {
        let mut c = container.clone();
        let name = container["name"].as_str().unwrap();
        let own = |field: &str| container[field].as_array().cloned().unwrap_or_default();
        c["env"] = env(vec![
            head(),
            own("env"),
            (self.env)(name),
            self.sdk.tail(service, name, version),
        ]);
        if let Some(mount) = self.mount {
            let mut mounts = own("volumeMounts");
            mounts.push(mount(name));
            c["volumeMounts"] = Value::Array(mounts);
        }
        c
    }

    /// The init containers of a pod that had none: the agent's, with `security`.
    pub fn inits(&self, security: Option<Value>) -> Option<Value> {
        self.init.map(|init| json!([init(security)]))
    }

    /// `volumes` followed by the agent's volume.
    pub fn volumes(&self, volumes: &Value) -> Option<Value> {
        let mut all = volumes.as_array().cloned().unwrap_or_default();
        if self.init.is_some() {
            all.push(agent_volume(self.name));
        }
        (!all.is_empty()).then_some(Value::Array(all))
    }
}

pub static JAVA: EnvLang = EnvLang {
    lang: Lang {
        language: Language::Java,
        name: "java",
        inject: INJECT_JAVA,
        shop: include_str!("../data/instrumentations/java.yaml"),
    },
    sdk: HTTP_SDK,
    env: java::env,
    init: Some(java::init),
    mount: Some(java::mount),
};

pub static NODEJS: EnvLang = EnvLang {
    lang: Lang {
        language: Language::NodeJs,
        name: "nodejs",
        inject: INJECT_NODEJS,
        shop: include_str!("../data/instrumentations/nodejs.yaml"),
    },
    sdk: HTTP_SDK,
    env: nodejs::env,
    init: Some(nodejs::init),
    mount: Some(nodejs::mount),
};

pub static PYTHON: EnvLang = EnvLang {
    lang: Lang {
        language: Language::Python,
        name: "python",
        inject: INJECT_PYTHON,
        shop: include_str!("../data/instrumentations/python.yaml"),
    },
    sdk: HTTP_SDK,
    env: python::env,
    init: Some(python::glibc_init),
    mount: Some(python::mount),
};

pub static DOTNET: EnvLang = EnvLang {
    lang: Lang {
        language: Language::DotNet,
        name: "dotnet",
        inject: INJECT_DOTNET,
        shop: include_str!("../data/instrumentations/dotnet.yaml"),
    },
    sdk: HTTP_SDK,
    env: dotnet::glibc_env,
    init: Some(dotnet::init),
    mount: Some(dotnet::mount),
};

pub static SDK: EnvLang = EnvLang {
    lang: Lang {
        language: Language::Sdk,
        name: "sdk",
        inject: INJECT_SDK,
        shop: include_str!("../data/instrumentations/sdk.yaml"),
    },
    sdk: sdk::SDK,
    env: sdk::env,
    init: None,
    mount: None,
};

pub static GO: Lang = Lang {
    language: Language::Go,
    name: "go",
    inject: INJECT_GO,
    shop: include_str!("../data/instrumentations/go.yaml"),
};

pub static APACHE: Lang = Lang {
    language: Language::ApacheHttpd,
    name: "apache-httpd",
    inject: INJECT_APACHE_HTTPD,
    shop: include_str!("../data/instrumentations/apache-httpd.yaml"),
};

pub static NGINX: Lang = Lang {
    language: Language::Nginx,
    name: "nginx",
    inject: INJECT_NGINX,
    shop: include_str!("../data/instrumentations/nginx.yaml"),
};

pub mod java {
    use super::*;

    pub const IMAGE: &str =
        "ghcr.io/open-telemetry/opentelemetry-operator/autoinstrumentation-java:2.30.0";

    pub fn env(container: &str) -> Vec<Value> {
        vec![
            lit("OTEL_INSTRUMENTATION_JDBC_ENABLED", "false"),
            lit("OTEL_LOGS_EXPORTER", "otlp"),
            lit(
                "JAVA_TOOL_OPTIONS",
                &format!(" -javaagent:/otel-auto-instrumentation-java-{container}/javaagent.jar"),
            ),
        ]
    }

    pub fn init(security: Option<Value>) -> Value {
        agent_init(
            "java",
            IMAGE,
            json!([
                "cp",
                "/javaagent.jar",
                "/otel-auto-instrumentation-java/javaagent.jar"
            ]),
            "64Mi",
            security,
        )
    }

    /// Each target mounts the agent at its own path.
    pub fn mount(container: &str) -> Value {
        agent_mount_at(
            "java",
            &format!("/otel-auto-instrumentation-java-{container}"),
        )
    }
}

pub mod nodejs {
    use super::*;

    pub const IMAGE: &str =
        "ghcr.io/open-telemetry/opentelemetry-operator/autoinstrumentation-nodejs:0.78.0";
    pub const REQUIRE: &str = " --require /otel-auto-instrumentation-nodejs/autoinstrumentation.js";

    pub fn env(_: &str) -> Vec<Value> {
        vec![
            lit("OTEL_NODE_RESOURCE_DETECTORS", "env,host"),
            lit("OTEL_LOGS_EXPORTER", "otlp"),
            lit("NODE_OPTIONS", REQUIRE),
            lit("OTEL_METRICS_EXPORTER", "otlp"),
        ]
    }

    pub fn init(security: Option<Value>) -> Value {
        agent_init(
            "nodejs",
            IMAGE,
            json!([
                "cp",
                "-r",
                "/autoinstrumentation/.",
                "/otel-auto-instrumentation-nodejs"
            ]),
            "128Mi",
            security,
        )
    }

    pub fn mount(_: &str) -> Value {
        agent_mount("nodejs")
    }
}

pub mod python {
    use super::*;

    pub const IMAGE: &str =
        "ghcr.io/open-telemetry/opentelemetry-operator/autoinstrumentation-python:0.64b0";
    pub const PREFIX: &str =
        "/otel-auto-instrumentation-python/opentelemetry/instrumentation/auto_instrumentation";
    pub const MOUNT: &str = "/otel-auto-instrumentation-python";
    pub const GLIBC: &str = "/autoinstrumentation/.";
    pub const MUSL: &str = "/autoinstrumentation-musl/.";

    /// The language env and PYTHONPATH, then spec.env, then the defaults not already set
    /// (spec.env sets the logs exporter, so the default one is not added).
    pub fn env(_: &str) -> Vec<Value> {
        vec![
            lit("OTEL_PYTHON_LOGGING_AUTO_INSTRUMENTATION_ENABLED", "true"),
            lit("PYTHONPATH", &format!("{PREFIX}:{MOUNT}")),
            lit("OTEL_LOGS_EXPORTER", "console"),
            lit("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
            lit("OTEL_TRACES_EXPORTER", "otlp"),
            lit("OTEL_METRICS_EXPORTER", "otlp"),
        ]
    }

    /// The init container copying the build at `source` ([`GLIBC`] or [`MUSL`]).
    pub fn init(source: &str, security: Option<Value>) -> Value {
        agent_init(
            "python",
            IMAGE,
            json!(["cp", "-r", source, MOUNT]),
            "64Mi",
            security,
        )
    }

    pub fn glibc_init(security: Option<Value>) -> Value {
        init(GLIBC, security)
    }

    pub fn mount(_: &str) -> Value {
        agent_mount("python")
    }
}

pub mod dotnet {
    use super::*;

    pub const IMAGE: &str =
        "ghcr.io/open-telemetry/opentelemetry-operator/autoinstrumentation-dotnet:1.16.0";
    pub const PROFILER_ID: &str = "{918728DD-259F-4A6A-AC2B-B85E1B658318}";
    pub const GLIBC: &str =
        "/otel-auto-instrumentation-dotnet/linux/OpenTelemetry.AutoInstrumentation.Native.so";
    pub const MUSL: &str =
        "/otel-auto-instrumentation-dotnet/linux-musl/OpenTelemetry.AutoInstrumentation.Native.so";
    pub const HOOK: &str =
        "/otel-auto-instrumentation-dotnet/net/OpenTelemetry.AutoInstrumentation.StartupHook.dll";
    pub const DEPS: &str = "/otel-auto-instrumentation-dotnet/AdditionalDeps";
    pub const STORE: &str = "/otel-auto-instrumentation-dotnet/store";
    pub const HOME: &str = "/otel-auto-instrumentation-dotnet";

    /// The .NET variables, in the Operator's order, with the profiler at `profiler`
    /// ([`GLIBC`] or [`MUSL`]).
    pub fn env(profiler: &str) -> Vec<Value> {
        vec![
            lit("OTEL_DOTNET_AUTO_TRACES_CONSOLE_EXPORTER_ENABLED", "false"),
            lit("OTEL_LOGS_EXPORTER", "otlp"),
            lit("CORECLR_ENABLE_PROFILING", "1"),
            lit("CORECLR_PROFILER", PROFILER_ID),
            lit("CORECLR_PROFILER_PATH", profiler),
            lit("DOTNET_STARTUP_HOOKS", HOOK),
            lit("DOTNET_ADDITIONAL_DEPS", DEPS),
            lit("OTEL_DOTNET_AUTO_HOME", HOME),
            lit("DOTNET_SHARED_STORE", STORE),
        ]
    }

    pub fn glibc_env(_: &str) -> Vec<Value> {
        env(GLIBC)
    }

    pub fn init(security: Option<Value>) -> Value {
        agent_init(
            "dotnet",
            IMAGE,
            json!(["cp", "-r", "/autoinstrumentation/.", HOME]),
            "128Mi",
            security,
        )
    }

    pub fn mount(_: &str) -> Value {
        agent_mount("dotnet")
    }
}

pub mod sdk {
    use super::*;

    /// The SDK settings of `sdk.yaml`.
    pub const SDK: Sdk = Sdk {
        propagators: "tracecontext,baggage,b3",
        sampler: "parentbased_always_on",
        sampler_arg: None,
        ..GRPC_SDK
    };

    /// spec.env: the SDK adds no variables of its own.
    pub fn env(_: &str) -> Vec<Value> {
        vec![lit("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")]
    }
}
