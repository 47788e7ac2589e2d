//! A container's environment and command line as the kubelet computes them, for the pod
//! runner (`runner.rs`):
//!
//! - `envFrom` first (ConfigMaps and Secrets, with `prefix`), then `env` in order;
//! - a `value` has its `$(VAR)` references expanded against the variables defined before it
//!   in the same container (envFrom and earlier `env` entries); `$$` is an escaped `$`; a
//!   reference to a variable not defined (yet) stays as written, so does a `$` that does not
//!   start `$$` or `$(…)`, and an unclosed `$(`;
//! - `valueFrom.fieldRef`: `metadata.name`, `.namespace`, `.uid`, `metadata.labels['K']`,
//!   `metadata.annotations['K']`, `spec.nodeName`, `spec.serviceAccountName`,
//!   `status.hostIP(s)`, `status.podIP(s)`; `resourceFieldRef`: `limits.*` / `requests.*` of
//!   cpu, memory, ephemeral-storage, divided by `divisor` (default 1) and rounded up, an unset
//!   limit being the node's allocatable; `configMapKeyRef` / `secretKeyRef` (`optional`);
//! - a name defined twice keeps its last value (at its first position);
//! - `command` and `args` are expanded against the final environment.
//!
//! Not done (the injector never relies on them): the service-link variables
//! (`enableServiceLinks`: `<SVC>_SERVICE_HOST`, …). The rules are the ones the Kubernetes
//! documentation gives ("Define Dependent Environment Variables", "Expose Pod Information to
//! Containers Through Environment Variables"); the unit tests below take its examples.

use std::collections::BTreeMap;

use serde_json::Value;

/// ConfigMaps and Secrets of the pod's namespace, by name: key → value (Secret data
/// already decoded).
#[derive(Clone, Debug, Default)]
pub struct Sources {
    pub config_maps: BTreeMap<String, BTreeMap<String, String>>,
    pub secrets: BTreeMap<String, BTreeMap<String, String>>,
}

/// Expands `$(VAR)` in `input` with `lookup` (the kubelet's `expansion.Expand`).
pub fn expand(input: &str, lookup: &dyn Fn(&str) -> Option<String>) -> String {
    let b = input.as_bytes();
    let mut out = String::new();
    let mut checkpoint = 0;
    let mut cursor = 0;
    while cursor < b.len() {
        if b[cursor] == b'$' && cursor + 1 < b.len() {
            out.push_str(&input[checkpoint..cursor]);
            let rest = &input[cursor + 1..];
            let advance = match rest.as_bytes()[0] {
                // `$$`: an escaped `$`.
                b'$' => {
                    out.push('$');
                    1
                }
                b'(' => match rest.find(')') {
                    Some(close) => {
                        let name = &rest[1..close];
                        match lookup(name) {
                            Some(v) => out.push_str(&v),
                            None => {
                                out.push_str("$(");
                                out.push_str(name);
                                out.push(')');
                            }
                        }
                        close + 1
                    }
                    // An unclosed `$(`: kept, the rest read on.
                    None => {
                        out.push_str("$(");
                        1
                    }
                },
                // A `$` that starts nothing: kept with the next character.
                _ => {
                    let c = rest.chars().next().unwrap_or_default();
                    out.push('$');
                    out.push(c);
                    c.len_utf8()
                }
            };
            cursor += advance;
            checkpoint = cursor + 1;
        }
        cursor += 1;
    }
    if checkpoint < input.len() {
        out.push_str(&input[checkpoint..]);
    }
    out
}

/// The environment of `container` (a container object of `pod`), in definition order.
/// `node_allocatable` is the node's `status.allocatable` (for unset limits).
pub fn container_env(
    pod: &Value,
    container: &Value,
    node_allocatable: &Value,
    sources: &Sources,
) -> Result<Vec<(String, String)>, String> {
    let mut env: Vec<(String, String)> = Vec::new();
    let set = |env: &mut Vec<(String, String)>, name: &str, value: String| match env
        .iter_mut()
        .find(|(n, _)| n == name)
    {
        Some(e) => e.1 = value,
        None => env.push((name.to_owned(), value)),
    };
    for from in container["envFrom"].as_array().into_iter().flatten() {
        let prefix = from["prefix"].as_str().unwrap_or("");
        let (kind, r, map) = if from["configMapRef"].is_object() {
            ("ConfigMap", &from["configMapRef"], &sources.config_maps)
        } else if from["secretRef"].is_object() {
            ("Secret", &from["secretRef"], &sources.secrets)
        } else {
            return Err(format!("envFrom: unsupported source {from}"));
        };
        let name = r["name"].as_str().unwrap_or("");
        match map.get(name) {
            Some(data) => {
                for (k, v) in data {
                    set(&mut env, &format!("{prefix}{k}"), v.clone());
                }
            }
            None if r["optional"] == true => {}
            None => return Err(format!("envFrom: {kind} {name} not found")),
        }
    }
    for e in container["env"].as_array().into_iter().flatten() {
        let name = e["name"]
            .as_str()
            .ok_or_else(|| format!("env without name: {e}"))?;
        let value = match e["value"].as_str() {
            Some(v) if !v.is_empty() => {
                let defined = env.clone();
                expand(v, &|var| {
                    defined
                        .iter()
                        .find(|(n, _)| n == var)
                        .map(|(_, v)| v.clone())
                })
            }
            _ => match &e["valueFrom"] {
                Value::Null => String::new(),
                from => match value_from(pod, container, from, node_allocatable, sources)? {
                    Some(v) => v,
                    // An optional key that is missing: the variable is not set.
                    None => continue,
                },
            },
        };
        set(&mut env, name, value);
    }
    Ok(env)
}

fn value_from(
    pod: &Value,
    container: &Value,
    from: &Value,
    node_allocatable: &Value,
    sources: &Sources,
) -> Result<Option<String>, String> {
    if let Some(path) = from["fieldRef"]["fieldPath"].as_str() {
        return field_ref(pod, path).map(Some);
    }
    if from["resourceFieldRef"].is_object() {
        return resource_field_ref(pod, container, &from["resourceFieldRef"], node_allocatable)
            .map(Some);
    }
    for (key, kind, map) in [
        ("configMapKeyRef", "ConfigMap", &sources.config_maps),
        ("secretKeyRef", "Secret", &sources.secrets),
    ] {
        let r = &from[key];
        if r.is_object() {
            let name = r["name"].as_str().unwrap_or("");
            let k = r["key"].as_str().unwrap_or("");
            return match map.get(name).and_then(|d| d.get(k)) {
                Some(v) => Ok(Some(v.clone())),
                None if r["optional"] == true => Ok(None),
                None => Err(format!("{kind} {name} has no key {k}")),
            };
        }
    }
    Err(format!("unsupported valueFrom {from}"))
}

/// The value of a downward-API `fieldPath` for an environment variable.
pub fn field_ref(pod: &Value, path: &str) -> Result<String, String> {
    let s = |v: &Value| v.as_str().unwrap_or("").to_owned();
    let ips = |v: &Value| {
        v.as_array()
            .into_iter()
            .flatten()
            .map(|i| i["ip"].as_str().unwrap_or("").to_owned())
            .collect::<Vec<_>>()
            .join(",")
    };
    let keyed = |prefix: &str| {
        path.strip_prefix(prefix)
            .and_then(|r| r.strip_prefix("['"))
            .and_then(|r| r.strip_suffix("']"))
    };
    Ok(match path {
        "metadata.name" => s(&pod["metadata"]["name"]),
        "metadata.namespace" => s(&pod["metadata"]["namespace"]),
        "metadata.uid" => s(&pod["metadata"]["uid"]),
        "spec.nodeName" => s(&pod["spec"]["nodeName"]),
        "spec.serviceAccountName" => s(&pod["spec"]["serviceAccountName"]),
        "status.hostIP" => s(&pod["status"]["hostIP"]),
        "status.hostIPs" => ips(&pod["status"]["hostIPs"]),
        "status.podIP" => s(&pod["status"]["podIP"]),
        "status.podIPs" => ips(&pod["status"]["podIPs"]),
        _ => {
            if let Some(k) = keyed("metadata.labels") {
                s(&pod["metadata"]["labels"][k])
            } else if let Some(k) = keyed("metadata.annotations") {
                s(&pod["metadata"]["annotations"][k])
            } else {
                return Err(format!("unsupported fieldRef {path}"));
            }
        }
    })
}

/// The value of a `resourceFieldRef`.
pub fn resource_field_ref(
    pod: &Value,
    container: &Value,
    r: &Value,
    node_allocatable: &Value,
) -> Result<String, String> {
    let target = match r["containerName"].as_str() {
        Some(name) if !name.is_empty() => pod["spec"]["containers"]
            .as_array()
            .into_iter()
            .chain(pod["spec"]["initContainers"].as_array())
            .flatten()
            .find(|c| c["name"] == name)
            .ok_or_else(|| format!("resourceFieldRef: no container {name}"))?,
        _ => container,
    };
    let resource = r["resource"].as_str().unwrap_or("");
    let (kind, what) = resource
        .split_once('.')
        .ok_or_else(|| format!("resourceFieldRef: {resource}"))?;
    if !matches!(kind, "limits" | "requests")
        || !matches!(what, "cpu" | "memory" | "ephemeral-storage")
    {
        return Err(format!("unsupported resourceFieldRef {resource}"));
    }
    let set = target["resources"][kind][what].as_str();
    // An unset limit is the node's allocatable; an unset request is the limit if that is
    // set (the apiserver's defaulting), else zero.
    let q = match (kind, set) {
        (_, Some(q)) => q.to_owned(),
        ("limits", None) => node_allocatable[what]
            .as_str()
            .ok_or_else(|| format!("node allocatable has no {what}"))?
            .to_owned(),
        _ => target["resources"]["limits"][what]
            .as_str()
            .unwrap_or("0")
            .to_owned(),
    };
    let value = Quantity::parse(&q)?;
    let divisor = match &r["divisor"] {
        Value::Null => Quantity::parse("1")?,
        Value::String(d) => Quantity::parse(d)?,
        Value::Number(n) => Quantity::parse(&n.to_string())?,
        d => return Err(format!("divisor {d}")),
    };
    if divisor.nanos == 0 {
        return Err("divisor 0".into());
    }
    Ok(if what == "cpu" {
        ceil_div(value.milli(), divisor.milli()).to_string()
    } else {
        ceil_div(value.whole(), divisor.whole()).to_string()
    })
}

fn ceil_div(a: i128, b: i128) -> i128 {
    let q = a / b;
    if (a % b != 0) && ((a < 0) == (b < 0)) {
        q + 1
    } else {
        q
    }
}

/// A Kubernetes resource quantity (`125m`, `64Mi`, `1.5`, `2e3`), held in billionths.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Quantity {
    pub nanos: i128,
}

impl Quantity {
    pub fn parse(s: &str) -> Result<Quantity, String> {
        let err = || format!("quantity {s:?}");
        let s = s.trim();
        let (sign, body) = match s.strip_prefix('-') {
            Some(r) => (-1, r),
            None => (1, s.strip_prefix('+').unwrap_or(s)),
        };
        let end = body
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(body.len());
        let (num, suffix) = body.split_at(end);
        if num.is_empty() || num == "." {
            return Err(err());
        }
        let (int, frac) = num.split_once('.').unwrap_or((num, ""));
        if frac.len() > 9 {
            return Err(err());
        }
        let digits: i128 = format!("{int}{frac:0<9}").parse().map_err(|_| err())?;
        // `digits` is the number in billionths.
        let (mul, div): (i128, i128) = match suffix {
            "" => (1, 1),
            "n" => (1, 1_000_000_000),
            "u" => (1, 1_000_000),
            "m" => (1, 1_000),
            "k" => (1_000, 1),
            "M" => (1_000_000, 1),
            "G" => (1_000_000_000, 1),
            "T" => (1_000_000_000_000, 1),
            "P" => (1_000_000_000_000_000, 1),
            "E" => (1_000_000_000_000_000_000, 1),
            "Ki" => (1 << 10, 1),
            "Mi" => (1 << 20, 1),
            "Gi" => (1 << 30, 1),
            "Ti" => (1 << 40, 1),
            "Pi" => (1 << 50, 1),
            "Ei" => (1 << 60, 1),
            e if e.starts_with(['e', 'E']) => {
                let exp: i32 = e[1..].parse().map_err(|_| err())?;
                if exp >= 0 {
                    (10i128.pow(exp as u32), 1)
                } else {
                    (1, 10i128.pow((-exp) as u32))
                }
            }
            _ => return Err(err()),
        };
        // Below a billionth rounds up, as Kubernetes does.
        let n = digits * mul;
        let nanos = n / div + i128::from(n % div != 0);
        Ok(Quantity {
            nanos: sign * nanos,
        })
    }

    /// Thousandths, rounded up (`MilliValue`).
    pub fn milli(&self) -> i128 {
        ceil_div(self.nanos, 1_000_000)
    }

    /// Whole units, rounded up (`Value`).
    pub fn whole(&self) -> i128 {
        ceil_div(self.nanos, 1_000_000_000)
    }
}

/// The process's command line: `command` (else the image's entrypoint) and `args` (else,
/// when `command` is not set, the image's cmd), each expanded against `env`.
pub fn command_line(
    container: &Value,
    entrypoint: &[String],
    cmd: &[String],
    env: &[(String, String)],
) -> Vec<String> {
    let strings = |v: &Value| -> Option<Vec<String>> {
        v.as_array().map(|a| {
            a.iter()
                .map(|s| s.as_str().unwrap_or("").to_owned())
                .collect()
        })
    };
    let (command, args) = match (strings(&container["command"]), strings(&container["args"])) {
        (Some(c), Some(a)) => (c, a),
        (Some(c), None) => (c, Vec::new()),
        (None, Some(a)) => (entrypoint.to_vec(), a),
        (None, None) => (entrypoint.to_vec(), cmd.to_vec()),
    };
    let lookup = |var: &str| env.iter().find(|(n, _)| n == var).map(|(_, v)| v.clone());
    command
        .iter()
        .chain(&args)
        .map(|s| expand(s, &lookup))
        .collect()
}

#[cfg(test)]
mod tests;
