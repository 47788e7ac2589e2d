//! Turns a [`PodPlan`] and the pod's outcome into targeted JSON-patch operations: appends
//! with `/-`, inserts at an index, parents created when missing, keys escaped. Objects the
//! user wrote are never re-serialized, so fields unknown to this build's API types survive
//! the patch.
//!
//! The builder emits typed operations (`add` of a typed value at a path, `remove`, `move`)
//! into a [`Sink`]: [`text`] writes them as the response's JSON text as they come, with no
//! `Value` tree of any object; [`both`] also collects them as [`PatchOperation`]s (to apply
//! them to a document), each operation going into both sinks as it is made: one write, the
//! same patch in two forms by construction.

use std::collections::BTreeMap;

use json_patch::jsonptr::PointerBuf;
use json_patch::{AddOperation, MoveOperation, PatchOperation, RemoveOperation};
use k8s_openapi::api::core::v1::{EnvVar, Pod};
use serde::Serialize;

use crate::engine::outcome::PodStatus;
use crate::keys::{INJECTED_LABEL, STATUS_ANNOTATION};
use crate::pod::plan::{ContainerPlan, InitPosition, PodPlan, Slot};

/// Where the builder's typed operations go.
trait Sink {
    /// `add` of `value` at the pointer made of `path`'s (unescaped) tokens.
    fn add<T: Serialize + ?Sized>(&mut self, path: &[&str], value: &T);
    /// [`Sink::add`] of one variable.
    fn add_env(&mut self, path: &[&str], var: &EnvVar) {
        self.add(path, var);
    }
    fn remove(&mut self, path: &[&str]);
    fn moved(&mut self, from: &[&str], path: &[&str]);
}

/// The patch as JSON text, written as it is built from the typed objects: no `Value` tree
/// is made of any of them.
#[derive(Debug, Default)]
struct JsonPatch {
    buf: Vec<u8>,
    ops: usize,
    pointer: String,
    failed: Option<serde_json::Error>,
}

impl JsonPatch {
    /// An empty patch whose text will take about `capacity` bytes.
    fn with_capacity(capacity: usize) -> Self {
        JsonPatch {
            buf: Vec::with_capacity(capacity),
            ..JsonPatch::default()
        }
    }

    /// The JSON array, `None` if no operation was written.
    fn finish(mut self) -> Result<Option<Vec<u8>>, serde_json::Error> {
        if let Some(e) = self.failed {
            return Err(e);
        }
        if self.ops == 0 {
            return Ok(None);
        }
        self.buf.push(b']');
        Ok(Some(self.buf))
    }

    fn start(&mut self, op: &str) {
        self.buf.push(if self.ops == 0 { b'[' } else { b',' });
        self.ops += 1;
        self.buf.extend_from_slice(br#"{"op":""#);
        self.buf.extend_from_slice(op.as_bytes());
        self.buf.push(b'"');
    }

    /// Writes `,"<key>":"<pointer>"`, the tokens escaped as RFC 6901 and the whole as JSON.
    /// Tokens that need no escaping of either kind (the field names, indices and `-` that
    /// make most paths) are copied as they are.
    fn pointer(&mut self, key: &str, tokens: &[&str]) {
        self.buf.extend_from_slice(b",\"");
        self.buf.extend_from_slice(key.as_bytes());
        self.buf.extend_from_slice(b"\":");
        if tokens.iter().all(|t| t.bytes().all(plain_pointer_byte)) {
            self.buf.push(b'"');
            for t in tokens {
                self.buf.push(b'/');
                self.buf.extend_from_slice(t.as_bytes());
            }
            self.buf.push(b'"');
            return;
        }
        self.pointer.clear();
        self.pointer
            .reserve(tokens.iter().map(|t| t.len() * 2 + 1).sum());
        for t in tokens {
            self.pointer.push('/');
            for c in t.chars() {
                match c {
                    '~' => self.pointer.push_str("~0"),
                    '/' => self.pointer.push_str("~1"),
                    c => self.pointer.push(c),
                }
            }
        }
        let pointer = std::mem::take(&mut self.pointer);
        self.write(pointer.as_str());
        self.pointer = pointer;
    }

    fn write<T: Serialize + ?Sized>(&mut self, value: &T) {
        if let Err(e) = serde_json::to_writer(&mut self.buf, value) {
            self.failed.get_or_insert(e);
        }
    }
}

impl Sink for JsonPatch {
    fn add<T: Serialize + ?Sized>(&mut self, path: &[&str], value: &T) {
        self.start("add");
        self.pointer("path", path);
        self.buf.extend_from_slice(br#","value":"#);
        self.write(value);
        self.buf.push(b'}');
    }

    /// [`Sink::add`] of one variable, a literal one written directly: most of what a
    /// patch adds, in the member order k8s-openapi writes (`name`, `value`, `valueFrom`).
    fn add_env(&mut self, path: &[&str], var: &EnvVar) {
        if var.value_from.is_some() {
            return self.add(path, var);
        }
        self.start("add");
        self.pointer("path", path);
        self.buf.extend_from_slice(br#","value":{"name":"#);
        self.write(var.name.as_str());
        if let Some(value) = &var.value {
            self.buf.extend_from_slice(br#","value":"#);
            self.write(value.as_str());
        }
        self.buf.extend_from_slice(b"}}");
    }

    fn remove(&mut self, path: &[&str]) {
        self.start("remove");
        self.pointer("path", path);
        self.buf.push(b'}');
    }

    fn moved(&mut self, from: &[&str], path: &[&str]) {
        self.start("move");
        self.pointer("from", from);
        self.pointer("path", path);
        self.buf.push(b'}');
    }
}

/// A byte that stands for itself in a JSON Pointer token written as a JSON string: printable
/// ASCII other than the pointer's `~` and `/` and the string's `"` and `\`.
fn plain_pointer_byte(b: u8) -> bool {
    matches!(b, 0x20..=0x7e) && !matches!(b, b'~' | b'/' | b'"' | b'\\')
}

/// The patch as [`PatchOperation`]s, each value serialized to a `Value` once.
#[derive(Debug, Default)]
struct Typed {
    ops: Vec<PatchOperation>,
    failed: Option<serde_json::Error>,
}

impl Sink for Typed {
    fn add<T: Serialize + ?Sized>(&mut self, path: &[&str], value: &T) {
        match serde_json::to_value(value) {
            Ok(value) => self.ops.push(PatchOperation::Add(AddOperation {
                path: pointer(path),
                value,
            })),
            Err(e) => {
                self.failed.get_or_insert(e);
            }
        }
    }

    fn remove(&mut self, path: &[&str]) {
        self.ops.push(PatchOperation::Remove(RemoveOperation {
            path: pointer(path),
        }));
    }

    fn moved(&mut self, from: &[&str], path: &[&str]) {
        self.ops.push(PatchOperation::Move(MoveOperation {
            from: pointer(from),
            path: pointer(path),
        }));
    }
}

/// Every operation into both sinks.
impl<A: Sink, B: Sink> Sink for (A, B) {
    fn add<T: Serialize + ?Sized>(&mut self, path: &[&str], value: &T) {
        self.0.add(path, value);
        self.1.add(path, value);
    }

    fn add_env(&mut self, path: &[&str], var: &EnvVar) {
        self.0.add_env(path, var);
        self.1.add_env(path, var);
    }

    fn remove(&mut self, path: &[&str]) {
        self.0.remove(path);
        self.1.remove(path);
    }

    fn moved(&mut self, from: &[&str], path: &[&str]) {
        self.0.moved(from, path);
        self.1.moved(from, path);
    }
}

fn pointer(tokens: &[&str]) -> PointerBuf {
    PointerBuf::from_tokens(tokens.iter().copied())
}

/// Appends `items` to the array at `base`, creating the array when the pod has none.
fn append_all<T: Serialize>(ops: &mut impl Sink, base: &[&str], exists: bool, items: &[T]) {
    if items.is_empty() {
        return;
    }
    if !exists {
        ops.add(base, items);
        return;
    }
    // `base` and `-`, on the stack (a patch path has at most 6 tokens).
    let mut tokens = [""; 8];
    tokens[..base.len()].copy_from_slice(base);
    tokens[base.len()] = "-";
    for item in items {
        ops.add(&tokens[..=base.len()], item);
    }
}

fn container_ops(ops: &mut impl Sink, list: &str, index: usize, c: &ContainerPlan<'_>) {
    let idx = index.to_string();
    let env_plan = &c.env;
    let env = ["spec", list, idx.as_str(), "env"];
    let append = ["spec", list, idx.as_str(), "env", "-"];
    if env_plan.original().is_empty() && c.container.env.is_none() {
        // No env list yet: one add with the whole list (prepends and appends both land here).
        let all = env_plan.to_vec();
        if !all.is_empty() {
            ops.add(&env, &all);
        }
    } else {
        // Edits address original indices, so they go first; prepends shift everything, so
        // they go last.
        // `add`, not `replace`: the API server omits empty values, so the entry may have
        // no `value` member, and RFC 6902 `replace` requires one.
        for (i, value) in env_plan.replaced() {
            let i = i.to_string();
            ops.add(
                &["spec", list, idx.as_str(), "env", i.as_str(), "value"],
                value,
            );
        }
        for e in env_plan.appended() {
            ops.add_env(&append, e);
        }
        if let Some(i) = env_plan.moved_to_end() {
            let i = i.to_string();
            ops.moved(&["spec", list, idx.as_str(), "env", i.as_str()], &append);
        }
        for e in env_plan.prepended().iter().rev() {
            ops.add_env(&["spec", list, idx.as_str(), "env", "0"], e);
        }
    }
    let mounts = ["spec", list, idx.as_str(), "volumeMounts"];
    let mut removed = c.removed_mounts.clone();
    removed.sort_unstable_by(|a, b| b.cmp(a));
    for i in removed {
        let i = i.to_string();
        ops.remove(&["spec", list, idx.as_str(), "volumeMounts", i.as_str()]);
    }
    append_all(
        ops,
        &mounts,
        c.container.volume_mounts.is_some(),
        &c.new_mounts,
    );
}

/// The JSON patch (text) for `pod`: the plan's changes when there is a plan, and the outcome
/// recorded on the pod when there is one (the [`STATUS_ANNOTATION`] and the
/// [`INJECTED_LABEL`], in the same operation as the plan's annotations). A key that already
/// holds the value is not written, so a pod recorded before (a reinvocation) gets no second
/// patch. `Ok(None)` when nothing changes; `Err` if an object could not be serialized (no
/// k8s-openapi type fails to, but a half-written patch must never reach the API server).
pub fn text(
    pod: &Pod,
    plan: Option<&PodPlan<'_>>,
    status: Option<&PodStatus>,
) -> Result<Option<Vec<u8>>, serde_json::Error> {
    let mut json = JsonPatch::with_capacity(if plan.is_some() { 4096 } else { 256 });
    emit(&mut json, pod, plan, status);
    json.finish()
}

/// One patch in both forms: its JSON text (what the size bound measures) and its typed
/// operations.
#[derive(Debug)]
pub struct Both {
    pub text: Vec<u8>,
    pub operations: Vec<PatchOperation>,
}

impl AsRef<[u8]> for Both {
    fn as_ref(&self) -> &[u8] {
        &self.text
    }
}

/// [`text`]'s patch, written once into both sinks: the text and the typed operations.
pub fn both(
    pod: &Pod,
    plan: Option<&PodPlan<'_>>,
    status: Option<&PodStatus>,
) -> Result<Option<Both>, serde_json::Error> {
    let mut sinks = (
        JsonPatch::with_capacity(if plan.is_some() { 4096 } else { 256 }),
        Typed::default(),
    );
    emit(&mut sinks, pod, plan, status);
    let (json, typed) = sinks;
    if let Some(e) = typed.failed {
        return Err(e);
    }
    Ok(json.finish()?.map(|text| Both {
        text,
        operations: typed.ops,
    }))
}

fn emit(sink: &mut impl Sink, pod: &Pod, plan: Option<&PodPlan<'_>>, status: Option<&PodStatus>) {
    if let Some(plan) = plan {
        write(plan, sink);
    }
    let mut annotations: BTreeMap<&str, &str> = plan
        .iter()
        .flat_map(|p| &p.new_annotations)
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let mut labels = BTreeMap::new();
    let rendered = status.map(|s| (s.to_string(), if s.injected() { "true" } else { "false" }));
    if let Some((text, injected)) = &rendered {
        annotations.insert(STATUS_ANNOTATION, text.as_str());
        labels.insert(INJECTED_LABEL, *injected);
    }
    let meta = &pod.metadata;
    add_keys(sink, "annotations", meta.annotations.as_ref(), annotations);
    add_keys(sink, "labels", meta.labels.as_ref(), labels);
}

/// Sets `keys` in the map `/metadata/<map>`: one `add` of the whole map when the pod has
/// none, else one `add` per key whose value differs.
fn add_keys(
    ops: &mut impl Sink,
    map: &str,
    existing: Option<&BTreeMap<String, String>>,
    mut keys: BTreeMap<&str, &str>,
) {
    if let Some(existing) = existing {
        keys.retain(|k, v| existing.get(*k).map(String::as_str) != Some(*v));
    }
    if keys.is_empty() {
        return;
    }
    match existing {
        None => ops.add(&["metadata", map], &keys),
        Some(_) => {
            for (k, v) in keys {
                ops.add(&["metadata", map, k], v);
            }
        }
    }
}

/// Writes the operations that turn the plan's pod into the planned pod.
fn write(plan: &PodPlan<'_>, ops: &mut impl Sink) {
    if !plan.is_changed() {
        return;
    }
    let spec = plan.pod.spec.as_ref();

    // Container edits use original indices: emit them before any insertion.
    for (slot, c) in plan.containers() {
        match slot {
            Slot::Init(i) => container_ops(ops, "initContainers", i, c),
            Slot::App(i) => container_ops(ops, "containers", i, c),
        }
    }

    let inits = spec.and_then(|s| s.init_containers.as_ref());
    if inits.is_none() {
        let all: Vec<_> = plan.new_init_containers.iter().map(|(_, c)| c).collect();
        append_all(ops, &["spec", "initContainers"], false, &all);
    } else {
        let at_end: Vec<_> = plan
            .new_init_containers
            .iter()
            .filter(|(p, _)| *p == InitPosition::End)
            .map(|(_, c)| c)
            .collect();
        append_all(ops, &["spec", "initContainers"], true, &at_end);
        // Inserts from the highest anchor down, so lower anchors keep their indices.
        let mut anchored: Vec<(usize, usize)> = plan
            .new_init_containers
            .iter()
            .enumerate()
            .filter_map(|(n, (p, _))| match p {
                InitPosition::Before(i) => Some((*i, n)),
                InitPosition::End => None,
            })
            .collect();
        anchored.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        let mut k = 0;
        while k < anchored.len() {
            let anchor = anchored[k].0;
            let mut offset = 0;
            while k < anchored.len() && anchored[k].0 == anchor {
                let at = (anchor + offset).to_string();
                let c = &plan.new_init_containers[anchored[k].1].1;
                ops.add(&["spec", "initContainers", at.as_str()], c);
                offset += 1;
                k += 1;
            }
        }
    }

    append_all(ops, &["spec", "containers"], true, &plan.new_containers);
    append_all(
        ops,
        &["spec", "volumes"],
        spec.is_some_and(|s| s.volumes.is_some()),
        &plan.new_volumes,
    );
    if plan.share_process_namespace && spec.and_then(|s| s.share_process_namespace) != Some(true) {
        ops.add(&["spec", "shareProcessNamespace"], &true);
    }
    // The plan's annotations are written with the outcome, by `emit`.
}

#[cfg(test)]
mod tests;
