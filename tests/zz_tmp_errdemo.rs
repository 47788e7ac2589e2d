#[test]
fn show() {
    let y = "apiVersion: opentelemetry.io/v1alpha1\nkind: Instrumentation\nmetadata: {name: a}\nspec:\n  sampler: {type: foo}\n";
    let r: Result<Vec<otel_injector::crd::InstrumentationSpec>, _> = serde_saphyr::from_multiple("sampler:\n  type: foo\n---\njava:\n  image: [1]\n");
    println!("{}", r.unwrap_err());
    let _ = y;
}
