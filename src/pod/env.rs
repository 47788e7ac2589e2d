//! The environment of one container as a plan: the original list plus the edits made to it,
//! so that the patch touches only what changed.

use std::collections::BTreeMap;

use crate::pod::names::NameSet;

use k8s_openapi::api::core::v1::EnvVar;

/// Room made for appended variables on the first append: about what the SDK configuration
/// and an agent append together (ten for the Java pod of `just load`), so the list does not
/// grow twice.
const APPENDED_HINT: usize = 12;

/// Environment of one container: the original list plus the edits made to it.
#[derive(Clone, Debug)]
pub struct EnvPlan<'a> {
    original: &'a [EnvVar],
    /// New literal values for original entries, by index.
    replaced: BTreeMap<usize, String>,
    /// Entries to put before every original entry, in final order.
    prepended: Vec<EnvVar>,
    /// Entries appended after the original ones, in final order.
    appended: Vec<EnvVar>,
    /// An original entry to move after every other entry.
    moved_to_end: Option<usize>,
    /// What the edits did besides adding a variable unless one of its name is defined, in
    /// order: how a container's own variables change them ([`EnvNote`]).
    notes: Vec<EnvNote>,
}

/// An edit of the plan that is more than "add this variable unless the container defines
/// one of its name": the agents' typed declaration of how a container's own variables
/// change what they add, which a policy replays without running them on a probe
/// (`policy::template`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EnvNote {
    /// `name` was added with others, all of them unless any of `unless` is defined.
    KeptOutBy {
        name: String,
        unless: &'static [&'static str],
    },
    /// `name` is extended in place ([`EnvPlan::extend`]); a container that sets it with
    /// `valueFrom` is left uninstrumented by the agent.
    Extended {
        name: &'static str,
        extension: ValueExtension,
    },
    /// `name` is merged into ([`EnvPlan::merge_last`]).
    Merged { name: &'static str },
    /// A container that defines `name` at all is left uninstrumented by the agent.
    Refuses { name: &'static str },
}

/// How a variable is extended: a literal value `v` becomes `prefix + v + suffix`, an empty
/// or missing one `empty` (the agent's part alone, without a separator).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ValueExtension {
    pub prefix: String,
    pub suffix: String,
    pub empty: String,
}

impl ValueExtension {
    /// `suffix` after any value, `suffix` alone when empty.
    pub fn after(suffix: String) -> Self {
        ValueExtension {
            prefix: String::new(),
            empty: suffix.clone(),
            suffix,
        }
    }

    /// `entry` after a `:` in a list of paths, alone when the list is empty (an empty entry
    /// would put the working directory on the path).
    pub fn path_list(entry: &str) -> Self {
        ValueExtension {
            prefix: String::new(),
            suffix: format!(":{entry}"),
            empty: entry.to_owned(),
        }
    }

    /// The extended value of `current`.
    fn of(&self, current: &str) -> String {
        match current {
            "" => self.empty.clone(),
            v => format!("{}{v}{}", self.prefix, self.suffix),
        }
    }
}

/// The value of a variable as it will be once the plan is applied.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EnvValue<'e> {
    /// A literal `value` (empty when unset).
    Literal(&'e str),
    /// Set from `valueFrom`: the webhook cannot read or extend it.
    ValueFrom,
}

enum Found {
    Original(usize),
    Prepended(usize),
    Appended(usize),
}

impl<'a> EnvPlan<'a> {
    pub fn new(original: &'a [EnvVar]) -> Self {
        EnvPlan {
            original,
            replaced: BTreeMap::new(),
            prepended: Vec::new(),
            appended: Vec::new(),
            moved_to_end: None,
            notes: Vec::new(),
        }
    }

    fn find(&self, name: &str) -> Option<Found> {
        if let Some(i) = self.prepended.iter().position(|e| e.name == name) {
            return Some(Found::Prepended(i));
        }
        if let Some(i) = self.original.iter().position(|e| e.name == name) {
            return Some(Found::Original(i));
        }
        self.appended
            .iter()
            .position(|e| e.name == name)
            .map(Found::Appended)
    }

    fn value_of(e: &EnvVar) -> EnvValue<'_> {
        match (&e.value_from, &e.value) {
            (Some(_), _) => EnvValue::ValueFrom,
            (None, v) => EnvValue::Literal(v.as_deref().unwrap_or("")),
        }
    }

    /// The variable's value after the plan, if it is defined at all.
    pub fn get(&self, name: &str) -> Option<EnvValue<'_>> {
        Some(match self.find(name)? {
            Found::Prepended(i) => Self::value_of(&self.prepended[i]),
            Found::Appended(i) => Self::value_of(&self.appended[i]),
            Found::Original(i) => match self.replaced.get(&i) {
                Some(v) => EnvValue::Literal(v),
                None => Self::value_of(&self.original[i]),
            },
        })
    }

    pub fn contains(&self, name: &str) -> bool {
        self.find(name).is_some()
    }

    /// Appends `var` unless a variable of that name exists: the user's value always wins.
    pub fn append_if_absent(&mut self, var: EnvVar) -> bool {
        if self.contains(&var.name) {
            return false;
        }
        self.append(var);
        true
    }

    fn append(&mut self, var: EnvVar) {
        if self.appended.capacity() == 0 {
            // What an agent and the SDK configuration append, in one allocation.
            self.appended.reserve(APPENDED_HINT);
        }
        self.appended.push(var);
    }

    /// Appends every one of `vars` that is absent, unless any of `unless` is defined (a
    /// setting made of several variables, which the user's own replaces whole).
    pub fn append_all_unless_any(
        &mut self,
        vars: impl IntoIterator<Item = EnvVar>,
        unless: &'static [&'static str],
    ) {
        if unless.iter().any(|n| self.contains(n)) {
            return;
        }
        for var in vars {
            let name = var.name.clone();
            if self.append_if_absent(var) {
                self.notes.push(EnvNote::KeptOutBy { name, unless });
            }
        }
    }

    /// Extends `name` in place by `extension` (appending its `empty` form when missing). A
    /// variable set with `valueFrom` is left alone: the agent refuses such a container first.
    pub fn extend(&mut self, name: &'static str, extension: ValueExtension) {
        let value = match self.get(name) {
            Some(EnvValue::ValueFrom) => None,
            Some(EnvValue::Literal(v)) => Some(extension.of(v)),
            None => Some(extension.empty.clone()),
        };
        if let Some(value) = value {
            self.set_literal(name, value);
        }
        self.notes.push(EnvNote::Extended { name, extension });
    }

    /// Merges into `name` and moves it after every other variable: `merged` is given the
    /// current literal value (`None` when missing) and returns the new one (`None`: as it
    /// is); a `valueFrom` is kept as it is.
    pub fn merge_last(
        &mut self,
        name: &'static str,
        merged: impl FnOnce(Option<&str>) -> Option<String>,
    ) {
        let value = match self.get(name) {
            Some(EnvValue::ValueFrom) => None,
            Some(EnvValue::Literal(v)) => merged(Some(v)),
            None => merged(None),
        };
        if let Some(value) = value {
            self.set_literal(name, value);
        }
        self.move_to_end(name);
        self.notes.push(EnvNote::Merged { name });
    }

    /// Declares that the agent leaves a container that defines `name` uninstrumented, and
    /// whether this one does.
    pub fn refuses(&mut self, name: &'static str) -> bool {
        self.notes.push(EnvNote::Refuses { name });
        self.contains(name)
    }

    /// The notes of the edits made, in order.
    pub fn notes(&self) -> &[EnvNote] {
        &self.notes
    }

    /// Puts `var` before all other variables unless one of that name exists, so that
    /// user variables can reference it with `$(NAME)`.
    pub fn prepend_if_absent(&mut self, var: EnvVar) -> bool {
        if self.contains(&var.name) {
            return false;
        }
        self.prepended.insert(0, var);
        true
    }

    /// Sets a literal value, replacing the current one in place or appending a new variable.
    /// A variable set with `valueFrom` is left alone and `false` is returned.
    fn set_literal(&mut self, name: &str, value: String) -> bool {
        match self.find(name) {
            None => {
                self.append(literal(name, value));
                true
            }
            Some(Found::Original(i)) => {
                if self.original[i].value_from.is_some() {
                    return false;
                }
                self.replaced.insert(i, value);
                true
            }
            Some(Found::Prepended(i)) => set_value(&mut self.prepended[i], value),
            Some(Found::Appended(i)) => set_value(&mut self.appended[i], value),
        }
    }

    /// Moves the variable after every other one (for `OTEL_RESOURCE_ATTRIBUTES`, whose
    /// `$(VAR)` references only resolve to variables defined earlier).
    fn move_to_end(&mut self, name: &str) {
        match self.find(name) {
            Some(Found::Original(i)) => self.moved_to_end = Some(i),
            Some(Found::Appended(i)) => {
                let v = self.appended.remove(i);
                self.append(v);
            }
            Some(Found::Prepended(i)) => {
                let v = self.prepended.remove(i);
                self.append(v);
            }
            None => {}
        }
    }

    /// A variable the plan adds that is already defined (by the user or by the plan).
    pub fn check_added(&self) -> Result<(), &str> {
        let mut seen: NameSet<'_> = self.original.iter().map(|e| e.name.as_str()).collect();
        for e in self.prepended.iter().chain(&self.appended) {
            if !seen.insert(&e.name) {
                return Err(&e.name);
            }
        }
        Ok(())
    }

    pub fn is_changed(&self) -> bool {
        !(self.replaced.is_empty()
            && self.prepended.is_empty()
            && self.appended.is_empty()
            && self.moved_to_end.is_none())
    }

    pub fn original(&self) -> &'a [EnvVar] {
        self.original
    }
    pub fn replaced(&self) -> &BTreeMap<usize, String> {
        &self.replaced
    }
    pub fn prepended(&self) -> &[EnvVar] {
        &self.prepended
    }
    pub fn appended(&self) -> &[EnvVar] {
        &self.appended
    }
    pub fn moved_to_end(&self) -> Option<usize> {
        // Already last with nothing appended after it: no move needed.
        self.moved_to_end
            .filter(|&i| !(i + 1 == self.original.len() && self.appended.is_empty()))
    }

    /// The final list, for callers that build a new container (the Go sidecar) and tests.
    pub fn to_vec(&self) -> Vec<EnvVar> {
        let mut out = self.prepended.clone();
        let mut last = None;
        for (i, e) in self.original.iter().enumerate() {
            let mut e = e.clone();
            if let Some(v) = self.replaced.get(&i) {
                e.value = Some(v.clone());
            }
            if self.moved_to_end == Some(i) {
                last = Some(e);
            } else {
                out.push(e);
            }
        }
        out.extend(self.appended.iter().cloned());
        out.extend(last);
        out
    }
}

fn set_value(e: &mut EnvVar, value: String) -> bool {
    if e.value_from.is_some() {
        return false;
    }
    e.value = Some(value);
    true
}

/// A literal `name=value` variable.
pub fn literal(name: &str, value: impl Into<String>) -> EnvVar {
    EnvVar {
        name: name.to_owned(),
        value: Some(value.into()),
        value_from: None,
    }
}

/// A variable from the downward API (`fieldRef`).
pub fn field_ref(name: &str, path: &str) -> EnvVar {
    use k8s_openapi::api::core::v1::{EnvVarSource, ObjectFieldSelector};
    EnvVar {
        name: name.to_owned(),
        value: None,
        value_from: Some(EnvVarSource {
            field_ref: Some(ObjectFieldSelector {
                field_path: path.to_owned(),
                api_version: None,
            }),
            ..Default::default()
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Vec<EnvVar> {
        pairs.iter().map(|(k, v)| literal(k, *v)).collect()
    }

    fn names(v: &[EnvVar]) -> Vec<String> {
        v.iter()
            .map(|e| format!("{}={}", e.name, e.value.as_deref().unwrap_or("<from>")))
            .collect()
    }

    #[test]
    fn user_values_win_and_order_is_kept() {
        let original = env(&[("A", "1"), ("OTEL_RESOURCE_ATTRIBUTES", "x=y"), ("B", "2")]);
        let mut p = EnvPlan::new(&original);
        assert!(!p.append_if_absent(literal("A", "other")));
        assert!(p.append_if_absent(literal("C", "3")));
        assert!(p.prepend_if_absent(field_ref("IP", "status.podIP")));
        assert!(p.set_literal("OTEL_RESOURCE_ATTRIBUTES", "x=y,k=v".into()));
        p.move_to_end("OTEL_RESOURCE_ATTRIBUTES");
        assert_eq!(
            names(&p.to_vec()),
            [
                "IP=<from>",
                "A=1",
                "B=2",
                "C=3",
                "OTEL_RESOURCE_ATTRIBUTES=x=y,k=v"
            ]
        );
        assert_eq!(p.get("A"), Some(EnvValue::Literal("1")));
        assert_eq!(p.get("IP"), Some(EnvValue::ValueFrom));
    }

    #[test]
    fn typed_edits_do_what_their_notes_say() {
        let original = vec![
            literal("JAVA_TOOL_OPTIONS", "-Xmx1g"),
            literal("PYTHONPATH", ""),
            field_ref("NODE_OPTIONS", "metadata.name"),
            literal("OTEL_RESOURCE_ATTRIBUTES", "a=b"),
            literal("OTEL_TRACES_SAMPLER_ARG", "0.1"),
            literal("Z", "1"),
        ];
        let mut p = EnvPlan::new(&original);
        p.extend("JAVA_TOOL_OPTIONS", ValueExtension::after(" -x".into()));
        p.extend("PYTHONPATH", ValueExtension::path_list("/p"));
        p.extend("NODE_OPTIONS", ValueExtension::after(" -y".into()));
        p.extend("LD_LIBRARY_PATH", ValueExtension::path_list("/lib"));
        const SAMPLER: &[&str] = &["OTEL_TRACES_SAMPLER", "OTEL_TRACES_SAMPLER_ARG"];
        p.append_all_unless_any([literal("OTEL_TRACES_SAMPLER", "always_on")], SAMPLER);
        p.append_all_unless_any([literal("K", "1"), literal("Z", "2")], &["NOT_SET"]);
        p.merge_last("OTEL_RESOURCE_ATTRIBUTES", |v| {
            v.map(|v| format!("{v},k=v"))
        });
        assert!(p.refuses("Z") && !p.refuses("NOT_SET"));
        assert_eq!(
            names(&p.to_vec()),
            [
                "JAVA_TOOL_OPTIONS=-Xmx1g -x",
                "PYTHONPATH=/p",
                "NODE_OPTIONS=<from>",
                "OTEL_TRACES_SAMPLER_ARG=0.1",
                "Z=1",
                "LD_LIBRARY_PATH=/lib",
                "K=1",
                "OTEL_RESOURCE_ATTRIBUTES=a=b,k=v",
            ]
        );
        let extended = |name, extension| EnvNote::Extended { name, extension };
        assert_eq!(
            p.notes(),
            [
                extended("JAVA_TOOL_OPTIONS", ValueExtension::after(" -x".into())),
                extended("PYTHONPATH", ValueExtension::path_list("/p")),
                extended("NODE_OPTIONS", ValueExtension::after(" -y".into())),
                extended("LD_LIBRARY_PATH", ValueExtension::path_list("/lib")),
                // The sampler was kept out whole; of the group, only what was added.
                EnvNote::KeptOutBy {
                    name: "K".into(),
                    unless: &["NOT_SET"]
                },
                EnvNote::Merged {
                    name: "OTEL_RESOURCE_ATTRIBUTES"
                },
                EnvNote::Refuses { name: "Z" },
                EnvNote::Refuses { name: "NOT_SET" },
            ]
        );
    }

    #[test]
    fn value_from_is_never_overwritten() {
        let original = vec![field_ref("JAVA_TOOL_OPTIONS", "metadata.name")];
        let mut p = EnvPlan::new(&original);
        assert!(!p.set_literal("JAVA_TOOL_OPTIONS", "x".into()));
        assert!(!p.is_changed());
    }

    #[test]
    fn moving_the_last_original_with_nothing_after_is_a_no_op() {
        let original = env(&[("A", "1")]);
        let mut p = EnvPlan::new(&original);
        p.move_to_end("A");
        assert_eq!(p.moved_to_end(), None);
    }
}
