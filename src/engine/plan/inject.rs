//! A language's injection: the targets its agent can take, the agent's edits, the exporter
//! TLS mounts and the declarative SDK configuration (held to the size rules of
//! [`bound`]), then the plan's check; a language that collides is taken back whole.

use super::{LanguageSkip, Scene, spec_hash};
use crate::agents::exporter_tls::ExporterTlsFiles;
use crate::agents::{Effect, Injection, Language, declarative};
use crate::crd::Instrumentation;
use crate::engine::bound;
use crate::engine::decision::{InjectedLanguage, Report, Skip};
use crate::engine::reason::SkipReason;
use crate::pod::plan::{PodPlan, Slot};
use crate::warnings::shorten;

/// The targets the language's agent can instrument: init containers only if it supports
/// them; the others are reported as warnings.
pub(super) fn init_targets(
    lang: Language,
    slots: Vec<Slot>,
    plan: &PodPlan<'_>,
    d: &mut Report,
) -> Vec<Slot> {
    if lang.agent().supports_init_targets() {
        return slots;
    }
    let (inits, apps): (Vec<_>, Vec<_>) =
        slots.into_iter().partition(|s| matches!(s, Slot::Init(_)));
    for s in inits {
        if let Some(c) = plan.original(s) {
            d.warn_about(
                lang,
                format!(
                    "{lang}: init container {:?} cannot be instrumented; skipped",
                    c.name
                ),
            );
        }
    }
    apps
}

/// The agent's injection into `plan`, then the plan's check: a language that collides with
/// the user's pod is taken back whole. Returns the Instrumentation (`ns/name`) and the
/// digest of the spec used; the agent's warnings are recorded with the language.
pub(super) fn inject(
    scene: &Scene<'_, '_>,
    lang: Language,
    inst: &Instrumentation,
    slots: &[Slot],
    plan: &mut PodPlan<'_>,
    d: &mut Report,
) -> Result<InjectedLanguage, LanguageSkip> {
    let snapshot = scene.snapshot;
    let found = Some(inst.qualified());
    let before = plan.is_changed().then(|| plan.clone());
    let mut warnings = Vec::new();
    let effect = lang.agent().inject(&mut Injection {
        lang,
        plan,
        info: scene.info,
        inst,
        targets: slots,
        images: &snapshot.config.images,
        delivery: snapshot.delivery(inst),
        annotations: scene.annotations,
        warnings: &mut warnings,
    });
    if let Effect::Injected(_) = effect {
        mount_exporter_tls(plan, slots, inst);
        if let Err(skip) = sdk_config(scene, lang, inst, slots, plan) {
            *plan = before.unwrap_or_else(|| PodPlan::new(plan.pod));
            return Err(LanguageSkip::Skip(skip));
        }
        if let Err(collision) = plan.check() {
            *plan = before.unwrap_or_else(|| PodPlan::new(plan.pod));
            return Err(LanguageSkip::Skip(Skip::new(
                Some(lang),
                SkipReason::NameCollision,
                found,
                format!("inject-{lang}: {collision}; not injected"),
            )));
        }
    }
    // The agent's own warnings explain a language it did not instrument.
    let said = (!matches!(effect, Effect::Injected(_))).then(|| {
        let said = warnings.join("; ");
        shorten(if said.is_empty() {
            format!("inject-{lang}: nothing could be instrumented; not injected")
        } else {
            said
        })
    });
    for w in warnings {
        d.warn_about(lang, w);
    }
    let reason = match effect {
        Effect::Injected(_) => {
            return Ok(InjectedLanguage {
                language: lang,
                instrumentation: inst.qualified(),
                spec: spec_hash(snapshot, inst),
            });
        }
        Effect::NothingInstrumented => SkipReason::NothingInstrumented,
        Effect::InvalidValue => SkipReason::InvalidValue,
    };
    Err(LanguageSkip::Said(Skip {
        language: Some(lang),
        reason,
        instrumentation: found,
        message: said.unwrap_or_default(),
    }))
}

/// `inst`'s declarative SDK configuration, when it has one, rendered, held to the size rules
/// ([`bound::sdk_config`]) and delivered to the containers the agent changed.
fn sdk_config(
    scene: &Scene<'_, '_>,
    lang: Language,
    inst: &Instrumentation,
    slots: &[Slot],
    plan: &mut PodPlan<'_>,
) -> Result<(), Skip> {
    let refused = |reason, why| {
        Skip::new(
            Some(lang),
            reason,
            Some(inst.qualified()),
            format!("inject-{lang}: {why}; not injected"),
        )
    };
    let rendered = match declarative::render(plan, slots, scene.info, inst) {
        Ok(Some(rendered)) => rendered,
        Ok(None) => return Ok(()),
        Err(declarative::Refused::Collision(why)) => {
            return Err(refused(SkipReason::NameCollision, why));
        }
        Err(declarative::Refused::Unrenderable(why)) => {
            return Err(refused(SkipReason::InvalidValue, why));
        }
    };
    bound::sdk_config(plan, (lang, &inst.qualified()), scene.asked, &rendered.text)?;
    declarative::deliver(plan, rendered);
    Ok(())
}

/// Mounts the exporter TLS files into every target the agent changed (the SDK variables
/// point into these mounts), and adds their volumes once.
fn mount_exporter_tls(plan: &mut PodPlan<'_>, slots: &[Slot], inst: &Instrumentation) {
    let Some(tls) = ExporterTlsFiles::of(&inst.spec) else {
        return;
    };
    let volumes = tls.volumes();
    if volumes.is_empty() {
        return;
    }
    for &slot in slots {
        if let Some(c) = plan.container(slot).filter(|c| c.is_changed()) {
            for (_, m) in &volumes {
                c.mount(m.clone());
            }
        }
    }
    for (v, _) in volumes {
        plan.add_volume(v);
    }
}
