use otel_injector::crd::crd_yaml;

#[test]
fn manifest_is_up_to_date() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/manifests/crd.yaml");
    let generated = crd_yaml();
    if std::env::var_os("UPDATE_CRD").is_some_and(|v| v == "1") {
        std::fs::write(path, &generated).expect("write manifests/crd.yaml");
        return;
    }
    let on_disk = std::fs::read_to_string(path).unwrap_or_default();
    assert!(on_disk == generated, "manifests/crd.yaml is stale; run `UPDATE_CRD=1 cargo test --test crd`");
}
