//! Tests of `metrics`.

use super::*;

#[test]
fn exposition_has_every_family_and_fixed_reasons() {
    let m = Metrics::new();
    m.request(RequestOutcome::Patched);
    m.duration.observe(0.00004);
    m.injection(Language::Java, InjectionOutcome::Injected);
    m.store("instrumentations", 3, true);
    m.certificate_served(1_796_083_200);
    m.duration.observe(4.2);
    m.auto_delivery("version", true);
    m.auto_delivery("feature_gate", false);
    let conns = m.connections("admin");
    conns.open.inc();
    conns.dropped(ConnClose::HeaderTimeout);
    for (i, reason) in ConnClose::ALL.into_iter().enumerate() {
        assert_eq!(reason as usize, i, "ConnClose::ALL is in declaration order");
    }
    let text = m.encode();
    for needle in [
        "otel_injector_admission_requests_total{outcome=\"patched\"} 1",
        "otel_injector_admission_requests_total{outcome=\"too_large\"} 0",
        "otel_injector_admission_duration_seconds_bucket{le=\"0.00005\"} 1",
        "otel_injector_admission_duration_seconds_bucket{le=\"2.5\"} 1",
        "otel_injector_admission_duration_seconds_bucket{le=\"4.0\"} 1",
        "otel_injector_admission_duration_seconds_bucket{le=\"5.0\"} 2",
        "otel_injector_admission_duration_seconds_count 2",
        "otel_injector_injections_total{language=\"java\",outcome=\"injected\"} 1",
        "otel_injector_not_injected_total{reason=\"cache_not_ready\"} 0",
        "otel_injector_store_objects{store=\"instrumentations\"} 3",
        "otel_injector_store_synced{store=\"instrumentations\"} 1",
        "otel_injector_certificate_reloads_total{result=\"error\"} 0",
        "# TYPE otel_injector_certificate_expiry_timestamp_seconds gauge",
        "otel_injector_certificate_expiry_timestamp_seconds 1796083200",
        "otel_injector_connections_open{listener=\"admin\"} 1",
        "otel_injector_connections_open{listener=\"webhook\"} 0",
        "otel_injector_connections_dropped_total{listener=\"admin\",reason=\"header_timeout\"} 1",
        "otel_injector_connections_dropped_total{listener=\"webhook\",reason=\"shed\"} 0",
        "otel_injector_apiserver_image_volumes{source=\"feature_gate\"} 0",
        "# TYPE otel_injector_build_info gauge",
        "# EOF",
    ] {
        assert!(text.contains(needle), "missing {needle:?} in\n{text}");
    }
    assert!(!text.contains("source=\"version\""), "{text}");
}

#[test]
fn build_info_is_one_series_with_the_build_facts() {
    let text = Metrics::new().encode();
    let lines: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("otel_injector_build_info"))
        .collect();
    let series = format!(
        "otel_injector_build_info{{version=\"{}\",commit=\"{}\",rustc=\"{}\",target=\"{}\"}} 1",
        env!("CARGO_PKG_VERSION"),
        crate::build_info::COMMIT,
        crate::build_info::RUSTC_VERSION,
        crate::build_info::TARGET,
    );
    assert_eq!(
        lines,
        [
            "# HELP otel_injector_build_info Always 1; the labels say what this binary was built from.",
            "# TYPE otel_injector_build_info gauge",
            series.as_str(),
        ]
    );
}
