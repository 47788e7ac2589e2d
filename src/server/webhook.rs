//! The webhook's routes, `POST /mutate-v1-pod` and `POST /convert` (the Instrumentation
//! CRD's conversion): a body limit, a deadline from `?timeout=`, and one span per request
//! (`review`, `conversion`), opened when the request arrives, so that every answer (4xx
//! included) is logged inside it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use tracing::Span;
use tracing::field::Empty;

use super::late::{self, InstrumentationWait};
use super::metrics::{ConversionOutcome, InjectionOutcome, Metrics, RequestOutcome, Waited};
use crate::admission::{self, Summary};
use crate::cluster::events::{EventSink, Notice, Reason};
use crate::crd::{CONVERSION_PATH, review};
use crate::duration;
use crate::engine::{Catalog, EngineConfig, InjectedLanguage};

/// Largest AdmissionReview accepted: the API server's own request limit (3 MiB).
pub const MAX_BODY_BYTES: usize = 3 * 1024 * 1024;
/// Largest ConversionReview accepted: a LIST converts every object in one review (about
/// 1 KiB each, so some 16,000 Instrumentations).
pub const MAX_CONVERSION_BYTES: usize = 16 * 1024 * 1024;
/// Deadline when the API server sends no `?timeout=` (its default `timeoutSeconds`).
pub const DEFAULT_DEADLINE: Duration = Duration::from_secs(10);
/// Longest `?timeout=` taken as it is: the API server's largest `timeoutSeconds`.
pub const MAX_DEADLINE: Duration = Duration::from_secs(30);

/// What the webhook handler needs.
pub struct Webhook {
    pub catalog: Arc<dyn Catalog + Send + Sync>,
    pub config: EngineConfig,
    pub metrics: Arc<Metrics>,
    /// Where the Events of skipped injections are queued (never waited on).
    pub events: EventSink,
    /// The conversions' share of memory ([`CONVERSION_BUDGET_BYTES`]).
    pub conversions: super::budget::ConversionBudget,
    /// Who may call the routes (everyone unless configured).
    pub auth: Arc<super::auth::Auth>,
    /// How a review waits for an Instrumentation its cache does not hold yet
    /// ([`super::late`]); `None`: never (Instrumentation files, or a wait of zero).
    pub instrumentation_wait: Option<InstrumentationWait>,
}

/// The webhook's routes.
///
/// Authentication, when on, guards `/mutate-v1-pod` only: the API server calls a CRD's
/// conversion webhook without credentials (apiextensions-apiserver resolves no kubeconfig for
/// it), so guarding `/convert` would break every v1beta1 read. A conversion reveals nothing
/// but the objects its caller sent, and its memory is bounded ([`super::budget::ConversionBudget`]).
pub fn router(state: Arc<Webhook>) -> Router {
    let mutate = match state.auth.required() {
        true => post(mutate).route_layer(axum::middleware::from_fn_with_state(
            (state.auth.clone(), state.metrics.clone()),
            super::auth::require,
        )),
        false => post(mutate),
    };
    Router::new()
        .route("/mutate-v1-pod", mutate)
        .route(CONVERSION_PATH, post(convert))
        .with_state(state)
}

/// The request's deadline: the API server's `?timeout=` (Go duration syntax), else
/// [`DEFAULT_DEADLINE`]. A value the API server never sends (zero, over [`MAX_DEADLINE`],
/// unparsable or overflowing) also gets the default: no client can make the server wait
/// longer for a body than the API server could, and no deadline can get near the end of
/// the clock (tokio panics on an `Instant` that overflows).
fn deadline_of(req: &Request) -> Duration {
    req.uri()
        .query()
        .into_iter()
        .flat_map(|q| q.split('&'))
        .find_map(|kv| kv.strip_prefix("timeout="))
        .and_then(duration::parse)
        .filter(|d| !d.is_zero() && *d <= MAX_DEADLINE)
        .unwrap_or(DEFAULT_DEADLINE)
}

/// Time kept in hand to write the answer before the caller's deadline.
fn budget(deadline: Duration) -> Duration {
    deadline.saturating_sub((deadline / 5).min(Duration::from_millis(500)))
}

fn text(status: StatusCode, msg: String) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        msg,
    )
        .into_response()
}

#[tracing::instrument(
    name = "review",
    skip_all,
    fields(uid = Empty, namespace = Empty, name = Empty, operation = Empty, outcome = Empty)
)]
async fn mutate(State(wh): State<Arc<Webhook>>, req: Request) -> Response {
    let arrived = tokio::time::Instant::now();
    let deadline = deadline_of(&req);
    let refused = |outcome| answered(&wh.metrics, outcome);
    let bytes = match read_body(req, deadline, MAX_BODY_BYTES, "AdmissionReview", refused).await {
        Ok(bytes) => bytes,
        Err(refused) => return refused.answer,
    };
    let reviewed = review_waiting(&wh, &bytes, arrived + budget(deadline)).await;
    let Reviewed { result, elapsed } = reviewed;
    match result {
        Err(e) => {
            answered(&wh.metrics, RequestOutcome::Invalid);
            tracing::warn!(error = %e, "unreadable AdmissionReview");
            text(StatusCode::BAD_REQUEST, format!("{e}\n"))
        }
        Ok((body, s)) => {
            populate_span_with_review(&s);
            count_injections(&wh.metrics, &s);
            queue_events(&wh.events, &s);
            let outcome = if s.patched {
                RequestOutcome::Patched
            } else {
                RequestOutcome::Unchanged
            };
            answered(&wh.metrics, outcome);
            log_review(&s, elapsed);
            let mut resp = Response::new(Body::from(body));
            resp.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
            resp
        }
    }
}

/// A review's answer and the time its reviews took (the waits between them left out).
struct Reviewed {
    result: Result<(Vec<u8>, Summary), admission::ReviewError>,
    elapsed: Duration,
}

/// Reviews `bytes`; when the answer skips a language for want of an Instrumentation the
/// cache does not hold, reviews again at each change of the Instrumentations until the skip
/// is gone or the wait ends (`--instrumentation-wait`, at the latest by `deadline`).
/// Each review is timed from its complete body (how fast the client uploads is not ours to
/// measure) and observed in the duration histogram; the waits are counted by outcome.
async fn review_waiting(wh: &Webhook, bytes: &[u8], deadline: tokio::time::Instant) -> Reviewed {
    let review = || {
        let started = Instant::now();
        let result = admission::review(bytes, wh.catalog.as_ref(), &wh.config);
        (result, started.elapsed())
    };
    let waits =
        |r: &Result<(Vec<u8>, Summary), _>| r.as_ref().is_ok_and(|(_, s)| late::missing(&s.report));
    let (mut result, mut elapsed) = review();
    if let Some(wait) = wh.instrumentation_wait.as_ref().filter(|_| waits(&result)) {
        // Followed from here (every other review pays nothing for it); a change made since
        // the first review is seen by the review that starts the loop.
        let mut follower = wait.follow();
        let started = tokio::time::Instant::now();
        let until = follower.until(started, deadline);
        let waited = loop {
            let (again, took) = review();
            (result, elapsed) = (again, elapsed + took);
            if !waits(&result) {
                break Waited::Found;
            }
            if !follower.changed(until).await {
                break Waited::Expired;
            }
        };
        wh.metrics.instrumentation_wait(waited);
        tracing::info!(
            outcome = waited.as_str(),
            millis = started.elapsed().as_millis() as u64,
            "waited for an Instrumentation"
        );
    }
    wh.metrics.duration.observe(elapsed.as_secs_f64());
    Reviewed { result, elapsed }
}

/// Why a body was not read: the answer.
struct RefusedBody {
    answer: Response,
}

/// `POST /convert`: a ConversionReview answered from the objects alone (no cache, no lease:
/// the API server cannot serve v1beta1 while this is down, so it serves from startup).
#[tracing::instrument(name = "conversion", skip_all, fields(uid = Empty, objects = Empty, outcome = Empty))]
async fn convert(State(wh): State<Arc<Webhook>>, req: Request) -> Response {
    let deadline = deadline_of(&req);
    let refused = |outcome| {
        let outcome = match outcome {
            RequestOutcome::Deadline => ConversionOutcome::Deadline,
            RequestOutcome::TooLarge => ConversionOutcome::TooLarge,
            _ => ConversionOutcome::Failure,
        };
        wh.metrics.conversion(outcome);
        Span::current().record("outcome", outcome.as_str());
    };
    let limit = MAX_CONVERSION_BYTES;
    // The review's share of the budget, before its body is read: what it declares (all of
    // the limit when it declares nothing; nothing when it declares too much, refused below).
    let share = match content_length(&req) {
        Some(n) if n > limit as u64 => 0,
        Some(n) => n as usize,
        None => limit,
    };
    let Ok(_share) = tokio::time::timeout(budget(deadline), wh.conversions.take(share)).await
    else {
        refused(RequestOutcome::Deadline);
        tracing::warn!(share, "no room to convert before the deadline");
        return text(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("no room to convert {share} bytes before the {deadline:?} deadline\n"),
        );
    };
    let bytes = match read_body(req, deadline, limit, "ConversionReview", refused).await {
        Ok(bytes) => bytes,
        Err(refused) => return refused.answer,
    };
    let started = Instant::now();
    let converted = review::review(&bytes);
    let elapsed = started.elapsed();
    wh.metrics
        .conversion_duration
        .observe(elapsed.as_secs_f64());
    wh.metrics
        .converted_objects
        .inc_by(converted.objects as u64);
    let outcome = match &converted.failure {
        None => ConversionOutcome::Success,
        Some(_) => ConversionOutcome::Failure,
    };
    wh.metrics.conversion(outcome);
    let span = Span::current();
    span.record("uid", converted.uid.as_str());
    span.record("objects", converted.objects);
    span.record("outcome", outcome.as_str());
    match &converted.failure {
        Some(message) => tracing::warn!(%message, "conversion failed"),
        None => tracing::debug!(
            to = converted.desired.map(|v| v.api_version()),
            micros = elapsed.as_micros() as u64,
            "converted"
        ),
    }
    let mut resp = Response::new(Body::from(converted.body));
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}

/// The whole body, within `limit` and before the deadline; otherwise why not, handed to
/// `refused` (which counts it and records it on the span) before it is logged.
async fn read_body(
    req: Request,
    deadline: Duration,
    limit: usize,
    what: &str,
    refused: impl Fn(RequestOutcome),
) -> Result<Bytes, RefusedBody> {
    let too_large = || RefusedBody {
        answer: text(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("{what} body exceeds the {limit} byte limit\n"),
        ),
    };
    let declared = content_length(&req);
    let mut body = req.into_body();
    if declared.is_some_and(|n| n > limit as u64) {
        refused(RequestOutcome::TooLarge);
        tracing::warn!(declared, limit, "{what} body over the limit");
        drain(&mut body, deadline).await;
        return Err(too_large());
    }
    let read = tokio::time::timeout(budget(deadline), collect(&mut body, declared, limit));
    match read.await {
        Ok(Ok(b)) => Ok(b),
        Ok(Err(ReadError::TooLarge)) => {
            refused(RequestOutcome::TooLarge);
            tracing::warn!(limit, "{what} body over the limit");
            drain(&mut body, deadline).await;
            Err(too_large())
        }
        Ok(Err(ReadError::Body(e))) => {
            refused(RequestOutcome::Invalid);
            tracing::warn!(error = %e, "request body could not be read");
            Err(RefusedBody {
                answer: text(
                    StatusCode::BAD_REQUEST,
                    format!("failed to read request body: {e}\n"),
                ),
            })
        }
        Err(_) => {
            refused(RequestOutcome::Deadline);
            tracing::warn!(?deadline, "request body not complete before the deadline");
            Err(RefusedBody {
                answer: text(
                    StatusCode::REQUEST_TIMEOUT,
                    format!("request body not received within the {deadline:?} deadline\n"),
                ),
            })
        }
    }
}

/// The most of a refused body read and dropped so that its sender reads the 413: a client
/// that writes the whole body before it reads (as most do) would otherwise see the
/// connection reset under its write, not the answer.
const DRAIN_BYTES: usize = 2 * MAX_CONVERSION_BYTES;
/// The longest time spent dropping a refused body.
const DRAIN_TIME: Duration = Duration::from_secs(5);

/// Reads and drops what is left of a refused body, up to [`DRAIN_BYTES`] and within the
/// deadline (and [`DRAIN_TIME`]); past either, the connection is closed with the rest unread.
async fn drain(body: &mut Body, deadline: Duration) {
    use http_body_util::BodyExt as _;
    let mut dropped = 0usize;
    let read_all = async {
        while let Some(Ok(frame)) = body.frame().await {
            if let Ok(data) = frame.into_data() {
                dropped += data.len();
                if dropped > DRAIN_BYTES {
                    return;
                }
            }
        }
    };
    let _ = tokio::time::timeout(budget(deadline).min(DRAIN_TIME), read_all).await;
}

/// The body length the request declares.
fn content_length(req: &Request) -> Option<u64> {
    req.headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
}

/// Why a body was not read whole.
enum ReadError {
    /// Past the limit.
    TooLarge,
    /// The connection failed or the client broke the framing.
    Body(axum::Error),
}

/// The body's bytes in one buffer, sized once from `Content-Length` when it is declared
/// (frame by frame otherwise), never past `limit`: a large review is held once, not once in
/// its frames and again in their copy.
async fn collect(body: &mut Body, declared: Option<u64>, limit: usize) -> Result<Bytes, ReadError> {
    use http_body_util::BodyExt as _;
    let first = declared.map_or(0, |n| usize::try_from(n).unwrap_or(limit).min(limit));
    let mut out = Vec::with_capacity(first);
    while let Some(frame) = body.frame().await {
        let Ok(data) = frame.map_err(ReadError::Body)?.into_data() else {
            continue;
        };
        if out.len() + data.len() > limit {
            return Err(ReadError::TooLarge);
        }
        out.extend_from_slice(&data);
    }
    Ok(Bytes::from(out))
}

/// Counts the answer and records it on the request's span (before it is logged, so the
/// log line carries it).
fn answered(metrics: &Metrics, outcome: RequestOutcome) {
    metrics.request(outcome);
    Span::current().record("outcome", outcome.as_str());
}

/// Records what the review says about itself on the request's span.
fn populate_span_with_review(s: &Summary) {
    let span = Span::current();
    span.record("uid", s.uid.as_str());
    span.record("namespace", s.namespace.as_str());
    span.record("name", s.name.as_str());
    span.record("operation", s.operation.as_str());
}

fn count_injections(metrics: &Metrics, s: &Summary) {
    for i in &s.report.injected {
        metrics.injection(i.language, InjectionOutcome::Injected);
    }
    for skip in &s.report.skipped {
        if let Some(l) = skip.language {
            metrics.injection(l, InjectionOutcome::Skipped);
        }
        metrics.skipped(skip.reason);
    }
}

/// Hands one Event per skip to the queue (`try_send`: the answer never waits for it). A dry
/// run has no side effects, so it records none.
fn queue_events(events: &EventSink, s: &Summary) {
    if s.dry_run || !events.is_enabled() {
        return;
    }
    for skip in &s.report.skipped {
        events.record(Notice {
            reason: Reason::Skipped,
            namespace: s.namespace.clone(),
            owner: s.owner.clone(),
            instrumentation: skip.instrumentation.clone(),
            language: skip.language,
            note: skip.message.clone(),
        });
    }
}

/// Languages written as a list of their names (`["java", "nodejs"]`), without collecting them.
struct LanguageNames<'a>(&'a [InjectedLanguage]);

impl std::fmt::Debug for LanguageNames<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.0.iter().map(|i| i.language.as_str()))
            .finish()
    }
}

/// The audit line of a review that asked for something (or got warnings): its kind, the
/// languages injected and the time taken; the warnings, a dry run and an earlier injection
/// only when there are (a field left out is its default: none, false).
fn log_review(s: &Summary, elapsed: Duration) {
    if s.report.requested || !s.report.warnings.is_empty() {
        let warnings = &s.report.warnings;
        tracing::info!(
            kind = %s.kind,
            injected = ?LanguageNames(&s.report.injected),
            warnings = (!warnings.is_empty()).then_some(tracing::field::debug(warnings)),
            dry_run = s.dry_run.then_some(true),
            already_injected = s.report.already_injected.then_some(true),
            micros = elapsed.as_micros() as u64,
            "reviewed"
        );
    } else {
        tracing::debug!(kind = %s.kind, "reviewed; nothing requested");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deadlines_keep_time_in_hand_to_answer() {
        assert_eq!(budget(Duration::from_secs(10)), Duration::from_millis(9500));
        assert_eq!(budget(Duration::from_secs(1)), Duration::from_millis(800));
        let req = |uri: &str| Request::post(uri).body(Body::empty()).unwrap();
        assert_eq!(
            deadline_of(&req("/mutate-v1-pod?timeout=3s")),
            Duration::from_secs(3)
        );
        assert_eq!(
            deadline_of(&req("/mutate-v1-pod?x=1&timeout=0m25s")),
            Duration::from_secs(25)
        );
        assert_eq!(
            deadline_of(&req("/mutate-v1-pod?timeout=30s")),
            MAX_DEADLINE
        );
        for default in [
            "/mutate-v1-pod",
            "/mutate-v1-pod?timeout=0s",
            "/m?timeout=ten",
            "/m?timeout=30s1ms",
            "/m?timeout=1m0s",
            "/m?timeout=1h",
            "/m?timeout=18446744073709551615s1s",
            "/m?timeout=18446744073709551615s",
            "/m?timeout=18446744073709551615s999ms",
            "/m?timeout=9223372036854775807s",
            "/m?timeout=99999999999999999999999s",
            "/m?timeout=5124095576030431h",
            "/m?timeout=-1s",
            "/m?timeout=1.5s",
            "/m?timeout=%31%30s",
        ] {
            assert_eq!(deadline_of(&req(default)), DEFAULT_DEADLINE, "{default}");
        }
    }
}
