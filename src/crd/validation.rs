//! The CRD's validation: CEL rules with their messages, and the length and pattern limits its
//! schema declares. Constants are public so tests can check the generated CRD against them.

/// Upper bound on `spec.sampler.argument`; keeps the CEL rules' cost bounded.
pub const SAMPLER_ARGUMENT_MAX_LENGTH: u32 = 1024;

// CEL rules. Regexes avoid backslashes so they need no escaping inside CEL string literals.
// A decimal number, as Go's strconv.ParseFloat accepts it (minus hex, inf and nan).
macro_rules! float_re {
    () => {
        "[+-]?([0-9]+([.][0-9]*)?|[.][0-9]+)([eE][+-]?[0-9]+)?"
    };
}

/// CEL: ratio samplers need an argument that is a number in [0, 1] (an empty argument is allowed).
pub const RULE_RATIO_ARGUMENT: &str = concat!(
    "!has(self.type) || !(self.type in ['traceidratio', 'parentbased_traceidratio'])",
    " || !has(self.argument) || self.argument == ''",
    " || (self.argument.matches('^",
    float_re!(),
    "$') && double(self.argument) >= 0.0 && double(self.argument) <= 1.0)"
);
/// Message of [`RULE_RATIO_ARGUMENT`].
pub const MSG_RATIO_ARGUMENT: &str =
    "sampler.argument must be a number between 0 and 1 for traceidratio samplers";

/// CEL: jaeger_remote arguments are `key=value` pairs separated by commas. `endpoint` must not
/// be empty, `pollingIntervalMs` must be an integer, `initialSamplingRate` a number in [0, 1].
/// Other keys are accepted, as the Operator accepts them.
pub const RULE_JAEGER_REMOTE_ARGUMENT: &str = concat!(
    "!has(self.type) || !(self.type in ['jaeger_remote', 'parentbased_jaeger_remote'])",
    " || !has(self.argument) || self.argument == ''",
    " || self.argument.split(',').all(p, p.matches('^[^=]*=[^=]*$') && (",
    "p.startsWith('endpoint=') ? size(p) > 9",
    " : p.startsWith('pollingIntervalMs=') ? p.matches('^pollingIntervalMs=[+-]?[0-9]+$')",
    " : p.startsWith('initialSamplingRate=') ? (p.matches('^initialSamplingRate=",
    float_re!(),
    "$') && double(p.substring(20)) >= 0.0 && double(p.substring(20)) <= 1.0)",
    " : true))"
);
/// Message of [`RULE_JAEGER_REMOTE_ARGUMENT`].
pub const MSG_JAEGER_REMOTE_ARGUMENT: &str = "sampler.argument for jaeger_remote samplers must be \
     comma-separated key=value pairs: endpoint must not be empty, pollingIntervalMs must be an \
     integer and initialSamplingRate a number between 0 and 1";

/// CEL: `volumeClaimTemplate` and `volumeLimitSize` are mutually exclusive. A template without
/// any content (`{metadata: {}, spec: {resources: {}}}`, which the Operator writes into every
/// language section it defaults) counts as unset, like the Operator's `IsZero` check.
pub const RULE_VOLUME_EXCLUSIVE: &str = concat!(
    "!has(self.volumeLimitSize) || !has(self.volumeClaimTemplate) || !(",
    "(has(self.volumeClaimTemplate.metadata) && (has(self.volumeClaimTemplate.metadata.name)",
    " || has(self.volumeClaimTemplate.metadata.namespace) || has(self.volumeClaimTemplate.metadata.labels)",
    " || has(self.volumeClaimTemplate.metadata.annotations) || has(self.volumeClaimTemplate.metadata.finalizers)))",
    " || has(self.volumeClaimTemplate.spec.accessModes) || has(self.volumeClaimTemplate.spec.dataSource)",
    " || has(self.volumeClaimTemplate.spec.dataSourceRef) || has(self.volumeClaimTemplate.spec.selector)",
    " || has(self.volumeClaimTemplate.spec.storageClassName)",
    " || has(self.volumeClaimTemplate.spec.volumeAttributesClassName)",
    " || has(self.volumeClaimTemplate.spec.volumeMode) || has(self.volumeClaimTemplate.spec.volumeName)",
    " || (has(self.volumeClaimTemplate.spec.resources) && (has(self.volumeClaimTemplate.spec.resources.limits)",
    " || has(self.volumeClaimTemplate.spec.resources.requests))))"
);
/// Message of [`RULE_VOLUME_EXCLUSIVE`].
pub const MSG_VOLUME_EXCLUSIVE: &str = "volumeClaimTemplate and volumeLimitSize cannot both be set; \
     remove volumeLimitSize (deprecated) or volumeClaimTemplate";

/// Pattern of `apacheHttpd.configPath` and `nginx.configFile` (as in the Operator).
pub const CONFIG_PATH_PATTERN: &str = "^[A-Za-z0-9._/-]*$";
/// Maximum length of `apacheHttpd.configPath` and `nginx.configFile` (as in the Operator).
pub const CONFIG_PATH_MAX_LENGTH: u32 = 256;

/// Kubernetes' resource.Quantity syntax, as the Operator's CRD (controller-gen) declares it.
pub const QUANTITY_PATTERN: &str = r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$";
