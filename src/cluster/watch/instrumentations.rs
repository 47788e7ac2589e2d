//! The Instrumentation index: each watch event decoded into the typed object, kept in the
//! engine's form only.

use std::sync::Arc;

use kube::api::DynamicObject;
use kube::runtime::watcher::Event;
use serde::Deserialize as _;

use super::Index;
use crate::crd::{Instrumentation, InstrumentationSpec};
use crate::engine::Instrumentations;
use crate::keys::LAST_APPLIED;

pub(crate) fn key_of(o: &DynamicObject) -> (String, String) {
    (
        o.metadata.namespace.clone().unwrap_or_default(),
        o.metadata.name.clone().unwrap_or_default(),
    )
}

/// The typed Instrumentation of an untyped object, moved out of it (no copy of its JSON);
/// the error says why it cannot be read.
pub(crate) fn to_typed(o: DynamicObject) -> Result<Instrumentation, String> {
    let DynamicObject {
        metadata, mut data, ..
    } = o;
    let mut field = |name: &str| data.get_mut(name).map(serde_json::Value::take);
    let spec = field("spec").ok_or_else(|| "missing field `spec`".to_owned())?;
    let status = field("status");
    let spec = InstrumentationSpec::deserialize(spec).map_err(|e| e.to_string())?;
    let status = match status {
        Some(s) => serde_json::from_value(s).map_err(|e| e.to_string())?,
        None => None,
    };
    let mut inst = Instrumentation {
        metadata,
        spec,
        status,
    };
    inst.read_carried()?;
    Ok(inst)
}

/// The index of listed objects, each typed or recorded as unreadable, with their bases
/// resolved as in the watched index (for the writers that list: the rollout).
pub(crate) fn index_of(objects: impl IntoIterator<Item = DynamicObject>) -> Instrumentations {
    let mut index = Instrumentations::default();
    for o in objects {
        let (namespace, name) = key_of(&o);
        match to_typed(o) {
            Ok(inst) => index.insert(inst),
            Err(e) => index.insert_unreadable(&namespace, &name, e),
        };
    }
    index
}

/// The engine's index kept current by the Instrumentation watch: each event is decoded into
/// the typed object and goes into the index, readable or not. A change makes a new index
/// from the current one (a request keeps the index it took); the objects of a list go into a
/// fresh one, published when the list is complete.
pub(super) struct InstrumentationCache {
    pub(super) index: Index,
    /// The index being filled by a list in progress.
    pub(super) listing: Option<Instrumentations>,
}

impl InstrumentationCache {
    fn current(&self) -> Arc<Instrumentations> {
        self.index.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn publish(&self, fresh: Instrumentations) {
        *self.index.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(fresh);
    }

    /// Puts one object into `index`: typed, or recorded as unreadable with the reason.
    fn put(index: &mut Instrumentations, o: DynamicObject) {
        let (namespace, name) = key_of(&o);
        match to_typed(o) {
            Ok(inst) => {
                index.insert(inst);
            }
            Err(e) => {
                tracing::warn!(%namespace, %name, error = %e, "Instrumentation cannot be read; ignored");
                index.insert_unreadable(&namespace, &name, e);
            }
        }
    }

    pub(super) fn apply(&mut self, ev: Event<DynamicObject>) {
        match ev {
            Event::Init => self.listing = Some(Instrumentations::default()),
            Event::InitApply(o) => Self::put(self.listing.get_or_insert_default(), o),
            Event::InitDone => {
                let fresh = self.listing.take().unwrap_or_default();
                self.publish(fresh);
            }
            Event::Apply(o) => {
                let mut next = Instrumentations::clone(&self.current());
                Self::put(&mut next, o);
                self.publish(next);
            }
            Event::Delete(o) => {
                let (namespace, name) = key_of(&o);
                let mut next = Instrumentations::clone(&self.current());
                if next.remove(&namespace, &name) {
                    self.publish(next);
                }
            }
        }
    }
}

/// What is kept of an Instrumentation: all but its managed fields and kubectl's copy of
/// the last applied object (a second copy of the whole spec).
pub(super) fn trim_instrumentation(o: &mut DynamicObject) {
    o.metadata.managed_fields = None;
    if let Some(a) = o.metadata.annotations.as_mut() {
        a.remove(LAST_APPLIED);
    }
}
