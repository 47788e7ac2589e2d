//! Tests of `metrics`.

use super::*;

#[test]
fn build_info_is_one_series_with_the_build_facts() {
    let text = Exposition::new(root()).encode();
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
