//! Shared bases in the index: an Instrumentation annotated `otel-injector/base` is indexed
//! laid over its base (and that one's, up to [`MAX_BASES`]), by `crd::base`'s rule. Resolved
//! when it or one of its bases enters or leaves the index, never per request; a base that is
//! missing, unreadable, too deep or part of a cycle leaves it unreadable, with the reason.

use std::sync::Arc;

use super::{IndexEntry, Indexed, Instrumentations};
use crate::crd::base::{merge_spec, parse_ref, path_within};
use crate::crd::{Instrumentation, SpecHash};
use crate::keys::BASE_ANNOTATION;

/// How many bases an Instrumentation may stand on, itself not counted.
pub const MAX_BASES: usize = 4;

/// What an Instrumentation that names a base takes from its bases.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Based {
    /// Its bases (`namespace/name`), nearest first, as far as they were found.
    pub chain: Vec<String>,
    /// Each value it takes from a base: its path in the spec (`java.image`, `env[X]`) and
    /// the base that set it.
    pub inherited: Vec<(String, String)>,
    /// Why it cannot be laid over its bases (then it is not readable).
    pub error: Option<String>,
}

/// The base an Instrumentation names, as written.
fn base_ref(inst: &Instrumentation) -> Option<&str> {
    inst.metadata
        .annotations
        .as_ref()?
        .get(BASE_ANNOTATION)
        .map(|s| s.trim())
}

impl Instrumentations {
    /// The entry of `own`, read as `namespace/name`: laid over its bases when it names one.
    pub(super) fn indexed(&self, namespace: &str, name: &str, own: IndexEntry) -> Indexed {
        let reference = own.as_ref().ok().and_then(|i| base_ref(i));
        let (entry, based) = match (&own, reference) {
            (Ok(inst), Some(reference)) => {
                let (entry, based) = self.lay(namespace, name, inst, reference);
                (entry, Some(Arc::new(based)))
            }
            _ => (own.clone(), None),
        };
        let spec_hash = entry.as_ref().ok().map(|i| SpecHash::of(&i.spec));
        Indexed {
            own,
            entry,
            spec_hash,
            based,
        }
    }

    /// Resolves again every entry that stands on `key` (after it changed or left).
    pub(super) fn resolve_dependents(&mut self, key: &str) {
        let Some(dependents) = self.dependents.get(key).cloned() else {
            return;
        };
        for dependent in dependents {
            let Some((ns, name)) = dependent.split_once('/') else {
                continue;
            };
            let Some(own) = self.own(ns, name).cloned() else {
                continue;
            };
            let indexed = self.indexed(ns, name, own);
            let based = indexed.based.clone();
            let slot = self.by_namespace.get_mut(ns).and_then(|m| m.get_mut(name));
            if let Some(old) = slot.map(|slot| std::mem::replace(slot, indexed)) {
                self.relink(&dependent, old.based.as_deref(), based.as_deref());
            }
        }
    }

    /// Moves `key` from the dependents of the bases of its `old` chain to those of its `new`
    /// one.
    pub(super) fn relink(&mut self, key: &str, old: Option<&Based>, new: Option<&Based>) {
        let chain = |b: Option<&Based>| b.map(|b| b.chain.clone()).unwrap_or_default();
        let (old, new) = (chain(old), chain(new));
        for base in old.iter().filter(|b| !new.contains(b)) {
            if let Some(set) = self.dependents.get_mut(base) {
                set.remove(key);
                if set.is_empty() {
                    self.dependents.remove(base);
                }
            }
        }
        for base in new {
            self.dependents
                .entry(base)
                .or_default()
                .insert(key.to_owned());
        }
    }

    /// `inst` laid over the chain of bases that starts at `reference`.
    fn lay(
        &self,
        namespace: &str,
        name: &str,
        inst: &Arc<Instrumentation>,
        reference: &str,
    ) -> (IndexEntry, Based) {
        let mut based = Based::default();
        let mut levels = vec![inst.clone()];
        let mut seen = vec![format!("{namespace}/{name}")];
        let (mut home, mut reference) = (namespace.to_owned(), reference.to_owned());
        let fail = |mut based: Based, error: String| {
            based.error = Some(error.clone());
            (Err(error), based)
        };
        loop {
            let Some((ns, base)) =
                parse_ref(&home, &reference).map(|(n, b)| (n.to_owned(), b.to_owned()))
            else {
                return fail(
                    based,
                    format!("base {reference:?} is not a name or namespace/name"),
                );
            };
            let key = format!("{ns}/{base}");
            based.chain.push(key.clone());
            if seen.contains(&key) {
                seen.push(key);
                return fail(based, format!("bases form a cycle: {}", seen.join(" -> ")));
            }
            if based.chain.len() > MAX_BASES {
                return fail(based, format!("more than {MAX_BASES} bases"));
            }
            let next = match self.own(&ns, &base) {
                None => return fail(based, format!("base \"{key}\" not found")),
                Some(Err(e)) => {
                    return fail(based, format!("base \"{key}\" cannot be read ({e})"));
                }
                Some(Ok(b)) => b.clone(),
            };
            let further = base_ref(&next).map(str::to_owned);
            seen.push(key);
            home = ns;
            levels.push(next);
            match further {
                Some(r) => reference = r,
                None => break,
            }
        }
        // From the top base down, each level laid over what stands under it.
        let mut spec = levels.pop().map(|l| l.spec.clone()).unwrap_or_default();
        let chain = based.chain.clone();
        for (level, source) in levels.iter().zip(&chain).rev() {
            let merged = match merge_spec(&level.spec, &spec) {
                Ok(m) => m,
                Err(e) => return fail(based, format!("laid over \"{source}\": {e}")),
            };
            based.inherited = attribute(merged.inherited, &based.inherited, source);
            spec = merged.spec;
        }
        // Laid over its bases already: it no longer names one (an index it is put into, the
        // policies' probes', does not look for them again).
        let mut metadata = inst.metadata.clone();
        if let Some(a) = metadata.annotations.as_mut() {
            a.remove(BASE_ANNOTATION);
        }
        let entry = Instrumentation {
            metadata,
            spec,
            status: inst.status.clone(),
        };
        (Ok(Arc::new(entry)), based)
    }
}

/// Who set each inherited path: the base it was taken from, unless that one took it (or
/// what holds it) from its own base; a path taken whole keeps the finer sources inside it.
fn attribute(
    paths: Vec<String>,
    under: &[(String, String)],
    source: &str,
) -> Vec<(String, String)> {
    let mut out = Vec::with_capacity(paths.len());
    for path in paths {
        if let Some((_, s)) = under.iter().find(|(q, _)| path_within(&path, q)) {
            out.push((path, s.clone()));
            continue;
        }
        let inside: Vec<_> = under
            .iter()
            .filter(|(q, _)| path_within(q, &path))
            .cloned()
            .collect();
        out.push((path, source.to_owned()));
        out.extend(inside);
    }
    out
}
