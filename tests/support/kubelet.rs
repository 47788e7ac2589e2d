//! A stand-in for the kubelet, for the tests that run the injected init containers' real
//! shell scripts: a container's environment is computed by the kubelet's rules (`$(VAR)`
//! expansion of env values, command and args; the downward API), and the container runs as a
//! local process under bubblewrap, with the image's files and the pod's volumes bound at the
//! paths the container sees. The scripts' absolute paths (`/opt/opentelemetry-webserver/...`)
//! are thus the real ones, and the product needs no test-only override.
//!
//! `bwrap` and `busybox` come from Debian's packages (`scripts/test-deps.sh`, run by
//! `just unit` and `just test`).

use std::collections::BTreeMap;
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

/// What the downward API answers for the pod.
pub struct Downward {
    pub pod_name: &'static str,
    pub namespace: &'static str,
    pub pod_ip: &'static str,
    pub host_ip: &'static str,
    pub node_name: &'static str,
}

/// The pod every script test runs: a Deployment's pod on node-1.
pub const POD: Downward = Downward {
    pod_name: "frontend-7d4b9c8f5-x2x9q",
    namespace: "shop",
    pod_ip: "10.244.1.17",
    host_ip: "10.0.0.7",
    node_name: "node-1",
};

impl Downward {
    fn field(&self, path: &str) -> &'static str {
        match path {
            "metadata.name" => self.pod_name,
            "metadata.namespace" => self.namespace,
            "status.podIP" => self.pod_ip,
            "status.hostIP" => self.host_ip,
            "spec.nodeName" => self.node_name,
            other => panic!("fieldRef {other} is not simulated"),
        }
    }
}

/// The kubelet's `$(VAR)` expansion (`third_party/forked/golang/expansion` in Kubernetes):
/// `$(NAME)` becomes NAME's value when NAME is in `vars` and stays as written otherwise,
/// `$$` becomes `$`, an unclosed `$(` and any other `$` are kept.
pub fn expand(input: &str, vars: &BTreeMap<String, String>) -> String {
    let mut out = String::new();
    let mut checkpoint = 0;
    let mut cursor = 0;
    while cursor < input.len() {
        if input.as_bytes()[cursor] == b'$' && cursor + 1 < input.len() {
            out.push_str(&input[checkpoint..cursor]);
            let rest = &input[cursor + 1..];
            let advance = if rest.starts_with('$') {
                out.push('$');
                1
            } else if let Some(reference) = rest.strip_prefix('(') {
                match reference.find(')') {
                    Some(end) => {
                        let name = &reference[..end];
                        match vars.get(name) {
                            Some(v) => out.push_str(v),
                            None => out.push_str(&format!("$({name})")),
                        }
                        end + 2
                    }
                    None => {
                        out.push_str("$(");
                        1
                    }
                }
            } else {
                let c = rest.chars().next().expect("a character follows");
                out.push('$');
                out.push(c);
                c.len_utf8()
            };
            cursor += advance;
            checkpoint = cursor + 1;
        }
        cursor += 1;
    }
    out.push_str(&input[checkpoint..]);
    out
}

/// The container's environment as its process sees it: each `env` entry in order, literal
/// values expanded against the entries before it, `fieldRef`s from the downward API.
pub fn container_env(container: &Value, pod: &Downward) -> BTreeMap<String, String> {
    let mut vars = BTreeMap::new();
    for e in container["env"].as_array().into_iter().flatten() {
        let name = e["name"].as_str().expect("env name").to_owned();
        let value = if let Some(path) = e.pointer("/valueFrom/fieldRef/fieldPath") {
            pod.field(path.as_str().expect("fieldPath")).to_owned()
        } else if e.get("valueFrom").is_some() {
            panic!("valueFrom of {name} is not simulated: {e}");
        } else {
            expand(e["value"].as_str().unwrap_or(""), &vars)
        };
        vars.insert(name, value);
    }
    vars
}

/// The shell and tools a container image brings.
#[derive(Clone, Copy, Debug)]
pub enum Shell {
    /// Debian's dash and GNU coreutils, as in the `httpd` and `nginx` images the clone runs.
    Dash,
    /// BusyBox's `sh` and applets, as in the Alpine-based agent image the attach step runs.
    Busybox,
}

pub const SHELLS: [Shell; 2] = [Shell::Dash, Shell::Busybox];

/// A directory of BusyBox applet links, bound at `/bin` for [`Shell::Busybox`].
fn busybox_bin(dir: &Path) -> PathBuf {
    let bin = dir.join("busybox-bin");
    if !bin.exists() {
        std::fs::create_dir_all(&bin).unwrap();
        let busybox = which("busybox");
        for applet in [
            "sh", "cp", "sed", "cat", "mv", "printf", "echo", "ls", "mkdir", "rm", "chmod",
        ] {
            symlink(&busybox, bin.join(applet)).unwrap();
        }
    }
    bin
}

fn which(tool: &str) -> PathBuf {
    for dir in ["/usr/bin", "/bin", "/usr/sbin", "/sbin"] {
        let p = Path::new(dir).join(tool);
        if p.exists() {
            return p;
        }
    }
    panic!("{tool} is not installed: run scripts/test-deps.sh (just unit does)");
}

/// One container to run: its spec from the patched pod, the image's files (container path
/// and host directory), and the host directory of each of the pod's volumes by name.
pub struct Run<'a> {
    pub container: &'a Value,
    pub image: &'a [(&'a str, &'a Path)],
    pub volumes: &'a BTreeMap<String, PathBuf>,
    pub shell: Shell,
    /// Scratch space of the test (the BusyBox links go there).
    pub scratch: &'a Path,
    /// More binds (host directory, container path), after the volumes.
    pub extra: &'a [(&'a Path, &'a str)],
}

impl Run<'_> {
    /// Runs the container's command and args, expanded as the kubelet does, and returns
    /// what it printed; panics with its output when it fails.
    pub fn run(&self, pod: &Downward) -> Output {
        let bwrap = which("bwrap");
        let env = container_env(self.container, pod);
        let mut argv: Vec<String> = Vec::new();
        for part in ["command", "args"] {
            for a in self.container[part].as_array().into_iter().flatten() {
                argv.push(expand(a.as_str().expect("string argument"), &env));
            }
        }
        assert!(!argv.is_empty(), "no command: {}", self.container);

        let mut cmd = Command::new(bwrap);
        cmd.env_clear();
        cmd.args(["--die-with-parent", "--unshare-pid", "--unshare-net"]);
        for dir in ["/usr/bin", "/usr/sbin", "/usr/lib"] {
            cmd.args(["--ro-bind", dir, dir]);
        }
        cmd.args(["--ro-bind-try", "/usr/lib64", "/usr/lib64"]);
        cmd.args(["--symlink", "usr/lib", "/lib"]);
        cmd.args(["--symlink", "usr/lib64", "/lib64"]);
        cmd.args(["--symlink", "usr/sbin", "/sbin"]);
        cmd.args([
            "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp", "--dir", "/etc",
        ]);
        let path = match self.shell {
            Shell::Dash => {
                cmd.args(["--symlink", "usr/bin", "/bin"]);
                "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
            }
            Shell::Busybox => {
                cmd.arg("--ro-bind")
                    .arg(busybox_bin(self.scratch))
                    .arg("/bin");
                "/usr/local/bin:/bin"
            }
        };
        for (at, host) in self.image {
            cmd.arg("--ro-bind").arg(host).arg(at);
        }
        for m in self.container["volumeMounts"]
            .as_array()
            .into_iter()
            .flatten()
        {
            let name = m["name"].as_str().expect("volume name");
            let at = m["mountPath"].as_str().expect("mountPath");
            let mut host = self
                .volumes
                .get(name)
                .unwrap_or_else(|| panic!("volume {name} has no host directory"))
                .clone();
            if let Some(sub) = m["subPath"].as_str() {
                host = host.join(sub);
            }
            let bind = if m["readOnly"] == true {
                "--ro-bind"
            } else {
                "--bind"
            };
            cmd.arg(bind).arg(host).arg(at);
        }
        for (host, at) in self.extra {
            cmd.arg("--bind").arg(host).arg(at);
        }
        cmd.args(["--chdir", "/", "--"]);
        cmd.args(&argv);
        cmd.env("PATH", path);
        cmd.envs(&env);
        let out = cmd.output().expect("bwrap runs");
        assert!(
            out.status.success(),
            "{} failed ({:?}):\nstdout: {}\nstderr: {}",
            self.container["name"],
            self.shell,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        out
    }
}

/// Writes `files` (relative path, content) under `dir`.
pub fn write_tree(dir: &Path, files: &[(&str, &str)]) {
    for (rel, content) in files {
        let p = dir.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, content).unwrap();
    }
}

/// Writes an executable script.
pub fn write_executable(path: &Path, content: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, content).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// Every file under `dir` with its content, by relative path (directories left out).
pub fn read_tree(dir: &Path) -> BTreeMap<String, String> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, String>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let p = entry.unwrap().path();
            if p.is_dir() {
                walk(root, &p, out);
            } else {
                let rel = p.strip_prefix(root).unwrap().to_string_lossy().into_owned();
                out.insert(rel, std::fs::read_to_string(&p).unwrap_or_default());
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}
