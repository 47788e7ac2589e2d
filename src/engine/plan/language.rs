//! The stages of one language before its agent runs: the namespace lets it run (Pod
//! Security), and its Instrumentation is found, may be used, and what it refers to is valid
//! and present.

use std::sync::Arc;

use crate::agents::Language;
use crate::crd::Instrumentation;
use crate::engine::decision::Skip;
use crate::engine::reason::SkipReason;
use crate::engine::references::{
    cross_namespace_denied, invalid_tls_reference, missing_tls_reference, resolve, v1beta1_refusal,
    wanted,
};
use crate::engine::snapshot::Snapshot;
use crate::pod::select::Request;

/// Whether the namespace lets the language's agent run: one that needs privileges is not
/// injected where Pod Security enforces `baseline` or `restricted`.
pub(super) fn admit_language(
    snapshot: &Snapshot<'_>,
    lang: Language,
    request: &Request<'_>,
) -> Result<(), Skip> {
    if !lang.agent().needs_privileges() {
        return Ok(());
    }
    let Some(level) = snapshot
        .namespace_info
        .as_ref()
        .and_then(|n| n.pod_security_enforce.as_deref())
        .filter(|l| *l == "baseline" || *l == "restricted")
    else {
        return Ok(());
    };
    Err(Skip::new(
        Some(lang),
        SkipReason::PodSecurity,
        wanted(snapshot, request),
        format!(
            "inject-{lang}: namespace enforces Pod Security {level:?}, which rejects the privileged {lang} agent; not injected"
        ),
    ))
}

/// The Instrumentation the request names, if the pod may use it and what it refers to is
/// valid and present. From here on, a skip names the Instrumentation that was found.
pub(super) fn instrumentation(
    snapshot: &Snapshot<'_>,
    lang: Language,
    request: &Request<'_>,
) -> Result<Arc<Instrumentation>, Skip> {
    let inst = resolve(snapshot, request, lang)
        .map_err(|(reason, msg)| Skip::new(Some(lang), reason, wanted(snapshot, request), msg))?;
    let found = || Some(inst.qualified());
    if let Some(msg) = cross_namespace_denied(snapshot, &inst, lang) {
        return Err(Skip::new(
            Some(lang),
            SkipReason::CrossNamespaceDenied,
            found(),
            msg,
        ));
    }
    if let Some((kind, name)) = invalid_tls_reference(&inst) {
        return Err(Skip::new(
            Some(lang),
            SkipReason::InvalidValue,
            found(),
            format!(
                "inject-{lang}: exporter TLS {} name {name:?} is not a valid DNS label; not injected",
                kind.as_str()
            ),
        ));
    }
    if let Some(skip) = v1beta1_refusal(snapshot, &inst, lang) {
        return Err(skip);
    }
    if let Some((kind, name)) = missing_tls_reference(snapshot, &inst) {
        return Err(Skip::new(
            Some(lang),
            SkipReason::ExporterTlsMissing,
            found(),
            format!(
                "inject-{lang}: exporter TLS {} {name:?} not found in namespace {:?}; not injected",
                kind.as_str(),
                snapshot.namespace
            ),
        ));
    }
    Ok(inst)
}
