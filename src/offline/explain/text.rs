//! The explanations as text for people (`--output text`).

use std::fmt::Write as _;

use super::Explanation;

/// The explanations as text for people.
pub fn text(explanations: &[Explanation]) -> String {
    let mut out = String::new();
    for (i, e) in explanations.iter().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        let _ = writeln!(out, "{} ({}, document {})", e.object, e.file, e.document);
        if e.requests.is_empty() {
            let _ = writeln!(
                out,
                "  nothing asked for injection: no instrumentation.opentelemetry.io/inject-* key on the pod or its namespace asks for a language (one set to \"false\" also keeps the selectors out), and no selector (otel-injector/selector) selects the pod"
            );
        }
        if e.already_injected {
            let _ = writeln!(
                out,
                "  already injected (otel-injector/injected or the Operator's containers): left unchanged"
            );
        }
        for r in &e.requests {
            let _ = if r.from == "selector" {
                writeln!(
                    out,
                    "  {}: asked by the selector of {} ({})",
                    r.language, r.value, r.annotation
                )
            } else {
                writeln!(
                    out,
                    "  {}: asked by the {} annotation {}: {:?}",
                    r.language, r.from, r.annotation, r.value
                )
            };
            match (&r.instrumentation, &r.why) {
                (Some(q), Some(why)) => {
                    let _ = writeln!(out, "    Instrumentation {q}: {why}");
                    if !r.bases.is_empty() {
                        let _ = writeln!(
                            out,
                            "    laid over its bases (otel-injector/base): {}",
                            r.bases.join(" -> ")
                        );
                    }
                    for i in &r.inherited {
                        let _ = writeln!(out, "      {} from {}", i.field, i.from);
                    }
                }
                _ => {
                    let _ = writeln!(out, "    not injected (see skipped)");
                }
            }
            for w in &r.warnings {
                let _ = writeln!(out, "    warning: {w}");
            }
            let _ = writeln!(
                out,
                "    targets: {} ({})",
                if r.targets.is_empty() {
                    "none".to_owned()
                } else {
                    r.targets.join(", ")
                },
                r.targets_why
            );
        }
        if let Some(p) = &e.path {
            let _ = match (&p.instrumentation, &p.why) {
                (Some(q), _) => writeln!(
                    out,
                    "  path: the policy of {q}, once applied (otel-injector policy); the webhook then leaves the pod alone"
                ),
                (_, why) => writeln!(
                    out,
                    "  path: the webhook only; a policy would not inject it: {}",
                    why.as_deref().unwrap_or("")
                ),
            };
        }
        for c in &e.containers {
            let added = if c.added { " (added)" } else { "" };
            let _ = writeln!(out, "  container {}{added}:", c.name);
            for v in &c.env {
                let _ = writeln!(out, "    {} = {:?}", v.name, v.value);
                let _ = writeln!(out, "      from {}: {}", v.source, v.detail);
            }
        }
        for s in &e.skipped {
            let _ = writeln!(
                out,
                "  skipped {} ({})",
                s.language.as_deref().unwrap_or("the pod"),
                s.reason
            );
            for msg in &s.messages {
                let _ = writeln!(out, "    {msg}");
            }
            let _ = writeln!(out, "    fix: {}", s.fix);
        }
        if let Some(file) = &e.sdk_config {
            let _ = writeln!(
                out,
                "  SDK configuration file (annotation otel-injector/sdk-config, OTEL_CONFIG_FILE):"
            );
            for line in file.lines() {
                let _ = writeln!(out, "    {line}");
            }
        }
        if let (Some(status), Some(label)) = (&e.status, e.injected_label) {
            let _ = writeln!(out, "  annotation otel-injector/status: {status}");
            let _ = writeln!(out, "  label otel-injector/injected: {label}");
        }
    }
    out
}
