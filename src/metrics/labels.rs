//! The bounded values of the metrics' labels, each an enum with its `ALL` and `as_str`
//! made by [`label_enum!`].

/// An enum of label values: `ALL` in declaration order, `as_str` the value as written.
macro_rules! label_enum {
    ($(#[$m:meta])* $name:ident { $($(#[$vm:meta])* $variant:ident => $text:literal),+ $(,)? }) => {
        $(#[$m])*
        #[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
        pub enum $name {
            $($(#[$vm])* $variant),+
        }

        impl $name {
            pub const ALL: [$name; [$($text),+].len()] = [$($name::$variant),+];

            pub const fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text),+
                }
            }
        }
    };
}

label_enum! {
    /// How an admission request ended (also the `outcome` field of the request's span).
    RequestOutcome {
        /// Allowed with a patch.
        Patched => "patched",
        /// Allowed without a patch.
        Unchanged => "unchanged",
        /// A body that is not an AdmissionReview (HTTP 400).
        Invalid => "invalid",
        /// A body over the size limit (HTTP 413).
        TooLarge => "too_large",
        /// The body did not arrive before the deadline (HTTP 408).
        Deadline => "deadline",
    }
}

label_enum! {
    /// What became of one language a pod asked for.
    InjectionOutcome {
        Injected => "injected",
        Skipped => "skipped",
    }
}

label_enum! {
    /// How a serving certificate reload ended.
    ReloadResult {
        Success => "success",
        Error => "error",
    }
}

label_enum! {
    /// What became of a Kubernetes Event about a skipped injection or missed pods.
    EventResult {
        /// Published (created, or a repeat added to its series).
        Recorded => "recorded",
        /// The same event (object, reason, message) was published within the window.
        Deduplicated => "deduplicated",
        /// Over the global or the per-object rate.
        RateLimited => "rate_limited",
        /// The queue was full (or closed): never reached the publisher.
        Dropped => "dropped",
        /// The API server refused it or did not answer in time.
        Failed => "failed",
    }
}

label_enum! {
    /// Why the server closed a connection before the client did.
    ConnClose {
        /// The listener was full and this connection had no request in progress.
        Shed => "shed",
        /// The TLS handshake did not finish in time.
        HandshakeTimeout => "handshake_timeout",
        /// A request head did not complete in time after its first byte.
        HeaderTimeout => "header_timeout",
        /// No request started in time on a new or keep-alive connection.
        IdleTimeout => "idle_timeout",
        /// A request's answer was not written out in time.
        RequestTimeout => "request_timeout",
    }
}

label_enum! {
    /// Why an answer told the client to close its connection (`Connection: close`).
    ConnRetire {
        /// The drain had begun.
        Draining => "draining",
        /// The connection was past `--max-connection-age`.
        MaxAge => "max_age",
    }
}

label_enum! {
    /// How a status write ended.
    WriteResult {
        Success => "success",
        Error => "error",
    }
}
