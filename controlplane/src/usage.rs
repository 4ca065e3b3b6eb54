//! Usage ingestion and cost reports.
//!
//! Data planes POST their spool in batches (`/api/v1/usage`, NDJSON of `UsageRecord`s, node
//! token). One batch is one statement in one transaction: `unnest` the columns, insert into the
//! month-partitioned `usage_events` with `ON CONFLICT DO NOTHING` (idempotent by request id), and
//! fold exactly the rows that were new into `usage_daily`. The 200 is the acknowledgement: only
//! then does the data plane delete the records from its spool. Reports read the rollups.

use ax_protocol::admin::{
    BudgetBurn, BudgetReport, CostReport, CostRow, RecentTraffic, RecentUpstream, RequestDetail, RequestList,
    RequestRow, TopSpender, TopSpenders, UsageAck,
};
use ax_protocol::usage::UsageRecord;
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use crate::auth::{Caller, Role};
use crate::error::{ApiError, ApiResult};
use crate::extract::{ApiBody, ApiPath, ApiQuery};
use crate::store::usage::{self as rows, refused_data, Columns, GroupBy};
use crate::AppState;

/// A record is refused whole if it is larger than this (records are about 1 KB).
const MAX_RECORD_BYTES: usize = 1024 * 1024;
/// `started_at_ms` must be a time Postgres can store (before year 10000).
const MAX_STARTED_MS: u64 = 253_402_300_799_999;

/// A line that cannot be stored, and why (shown in `usage_dead_letters`).
struct DeadLetter<'a> {
    line: &'a [u8],
    request_id: Option<String>,
    reason: String,
}

/// Text made safe to store: Postgres text refuses NUL, so a reason that quotes one (serde's
/// messages quote the value they refused) has it replaced.
fn safe_text(s: &str) -> String {
    s.replace('\0', "\u{fffd}")
}

/// Reads one line into a record and its JSON, or says why it cannot be stored.
fn read_record(line: &[u8]) -> Result<(UsageRecord, Value), (String, Option<String>)> {
    if line.len() > MAX_RECORD_BYTES {
        return Err((format!("record larger than {MAX_RECORD_BYTES} bytes"), None));
    }
    // One parse: the typed record is read out of the kept JSON value.
    let raw: Value = serde_json::from_slice(line).map_err(|e| (format!("not JSON: {e}"), None))?;
    let id = raw.get("request_id").and_then(Value::as_str).map(safe_text);
    let r = UsageRecord::deserialize(&raw).map_err(|e| (format!("not a usage record: {e}"), id.clone()))?;
    if r.request_id.is_empty() || r.request_id.len() > 256 {
        return Err(("request_id must have 1-256 characters".to_owned(), id));
    }
    if let Some(path) = crate::error::nul_at(&raw, &mut String::new()) {
        return Err((format!("text with a NUL character at {path}"), id));
    }
    if r.started_at_ms > MAX_STARTED_MS {
        return Err(("started_at_ms is out of range".to_owned(), id));
    }
    Ok((r, raw))
}

/// `POST /api/v1/usage`: one batch from one data plane. Each record is judged on its own: one the
/// control plane cannot read or the database refuses goes to `usage_dead_letters` with the reason
/// (and is counted), the rest are stored, and the batch is answered 200 so the node's spool moves
/// on. Only a failure of the database itself answers 5xx (the batch is offered again): the
/// database refusing the data (SQLSTATE classes 22, 23, 54) has the records judged one by one.
pub async fn ingest(
    State(state): State<AppState>,
    headers: HeaderMap,
    ApiBody(body): ApiBody,
) -> ApiResult<Json<UsageAck>> {
    let node = crate::push::node_of(&state, &headers).await?;
    let mut cols = Columns::default();
    let mut lines_kept: Vec<&[u8]> = Vec::new();
    let mut dead: Vec<DeadLetter<'_>> = Vec::new();
    for line in body.split(|&b| b == b'\n').filter(|l| !l.iter().all(u8::is_ascii_whitespace)) {
        match read_record(line) {
            Ok((r, raw)) => {
                cols.push(r, raw);
                lines_kept.push(line);
            }
            Err((reason, request_id)) => dead.push(DeadLetter { line, request_id, reason }),
        }
    }
    let received = cols.len() + dead.len();
    let unreadable = dead.len();
    let mut tx = state.db.begin().await?;
    let mut inserted = 0;
    if !cols.is_empty() {
        let mut batch = sqlx::Connection::begin(&mut *tx).await?;
        match rows::insert(&mut batch, &cols, &node).await {
            Ok(n) => {
                batch.commit().await?;
                inserted = n;
            }
            Err(e) if refused_data(&e) => {
                batch.rollback().await?;
                tracing::warn!(node = %node, error = %e, "a usage batch was refused; storing its records one by one");
                for (i, line) in lines_kept.iter().enumerate() {
                    let mut one = sqlx::Connection::begin(&mut *tx).await?;
                    match rows::insert(&mut one, &cols.row(i), &node).await {
                        Ok(n) => {
                            one.commit().await?;
                            inserted += n;
                        }
                        Err(e) if refused_data(&e) => {
                            one.rollback().await?;
                            let reason = format!("refused by the database: {e}");
                            dead.push(DeadLetter { line, request_id: Some(safe_text(&cols.request_id[i])), reason });
                        }
                        Err(e) => return Err(e.into()),
                    }
                }
            }
            Err(e) => return Err(e.into()),
        }
    }
    let mut dead_lettered = 0u64;
    for d in &dead {
        let reason = safe_text(&d.reason);
        tracing::error!(node = %node, request_id = d.request_id.as_deref(), reason = %reason,
            line = %String::from_utf8_lossy(d.line), "usage record dead-lettered");
        let mut digest = Sha256::new();
        digest.update(node.as_bytes());
        digest.update(b"\n");
        digest.update(d.line);
        let digest = hex::encode(digest.finalize());
        if rows::dead_letter(&mut tx, &node, d.request_id.as_deref(), &reason, d.line, &digest).await? {
            dead_lettered += 1;
        }
    }
    tx.commit().await?;
    if dead_lettered > 0 {
        metrics::counter!("ax_usage_dead_letters_total", "node" => node.clone()).increment(dead_lettered);
    }
    let refused = dead.len() - unreadable;
    Ok(Json(UsageAck {
        received,
        inserted,
        duplicates: (cols.len() - refused) as i64 - inserted,
        dead_lettered: dead.len(),
    }))
}

#[derive(Deserialize)]
pub struct ReportQuery {
    /// Inclusive, `YYYY-MM-DD` (UTC days). Default: the last 30 days.
    #[serde(default)]
    from: Option<String>,
    #[serde(default)]
    to: Option<String>,
    /// `day` (default) or `month`.
    #[serde(default)]
    period: Option<String>,
    /// Grouping below the period: `tenant` (default), `alias`, `model`, `key`.
    #[serde(default)]
    by: Option<String>,
    #[serde(default)]
    tenant: Option<String>,
    #[serde(default)]
    alias: Option<String>,
    #[serde(default)]
    model: Option<String>,
    /// `json` (default) or `csv`.
    #[serde(default)]
    format: Option<String>,
}

/// A report's date parameter, as Postgres reads it: `YYYY-MM-DD` in years 1970–9999 (a date the
/// parser takes but Postgres refuses, such as `-009999-01-01`, would be a 500).
fn report_date(field: &str, v: Option<&str>) -> ApiResult<Option<String>> {
    let Some(v) = v else { return Ok(None) };
    match v.parse::<jiff::civil::Date>() {
        Ok(d) if (1970..=9999).contains(&d.year()) => Ok(Some(d.to_string())),
        _ => Err(ApiError::field(field, "a date as YYYY-MM-DD, years 1970 to 9999")),
    }
}

fn micro_usd(v: i64) -> String {
    let sign = if v < 0 { "-" } else { "" };
    let a = v.unsigned_abs();
    format!("{sign}{}.{:06}", a / 1_000_000, a % 1_000_000)
}

/// `GET /api/v1/reports/cost`: cost and tokens per period and tenant (or alias, model, key),
/// from the daily rollups; `format=csv` downloads the same rows.
pub async fn cost_report(
    State(state): State<AppState>,
    caller: Caller,
    ApiQuery(q): ApiQuery<ReportQuery>,
) -> ApiResult<Response> {
    caller.require(Role::Finance)?;
    let period = match q.period.as_deref().unwrap_or("day") {
        "day" => "day",
        "month" => "month",
        _ => return Err(ApiError::field("period", "day or month")),
    };
    let (by, group) = match q.by.as_deref().unwrap_or("tenant") {
        "tenant" => (GroupBy::Tenant, "tenant"),
        "alias" => (GroupBy::Alias, "alias"),
        "model" => (GroupBy::Model, "model"),
        "key" => (GroupBy::Key, "key"),
        _ => return Err(ApiError::field("by", "tenant, alias, model or key")),
    };
    let from = report_date("from", q.from.as_deref())?;
    let to = report_date("to", q.to.as_deref())?;
    let rows = rows::cost_rows(
        &state.db,
        period == "month",
        by,
        from.as_deref(),
        to.as_deref(),
        q.tenant.as_deref(),
        q.alias.as_deref(),
        q.model.as_deref(),
    )
    .await?;
    if q.format.as_deref() == Some("csv") {
        let mut csv = format!(
            "period,{group},requests,errors,prompt_tokens,completion_tokens,cached_tokens,cache_write_tokens,cost_usd\n"
        );
        for r in &rows {
            csv.push_str(&format!(
                "{},{},{},{},{},{},{},{},{}\n",
                r.0,
                csv_field(&r.1),
                r.2,
                r.3,
                r.4,
                r.5,
                r.6,
                r.7,
                micro_usd(r.8)
            ));
        }
        let mut resp = csv.into_response();
        resp.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/csv; charset=utf-8"));
        resp.headers_mut()
            .insert(header::CONTENT_DISPOSITION, HeaderValue::from_static("attachment; filename=\"ax-cost.csv\""));
        return Ok(resp);
    }
    let total: i64 = rows.iter().map(|r| r.8).sum();
    let rows = rows
        .into_iter()
        .map(|r| CostRow {
            cost_usd: micro_usd(r.8),
            period: r.0,
            group: r.1,
            requests: r.2,
            errors: r.3,
            prompt_tokens: r.4,
            completion_tokens: r.5,
            cached_tokens: r.6,
            cache_write_tokens: r.7,
            cost_micro_usd: r.8,
        })
        .collect();
    let mut report = json!(CostReport {
        period: period.to_owned(),
        by: group.to_owned(),
        rows,
        total_micro_usd: total,
        total_usd: micro_usd(total),
    });
    // Each row also names its group under the group's own key (`"tenant": "acme"`), as before
    // `group` existed.
    for row in report["rows"].as_array_mut().into_iter().flatten() {
        row[group] = row["group"].clone();
    }
    Ok(Json(report).into_response())
}

#[derive(Deserialize)]
pub struct TopQuery {
    #[serde(default)]
    from: Option<String>,
    #[serde(default)]
    to: Option<String>,
    #[serde(default)]
    limit: Option<i64>,
}

/// `GET /api/v1/reports/top`: the tenants that spent most in the range (default: last 30 days).
pub async fn top_spenders(
    State(state): State<AppState>,
    caller: Caller,
    ApiQuery(q): ApiQuery<TopQuery>,
) -> ApiResult<Json<TopSpenders>> {
    caller.require(Role::Finance)?;
    let from = report_date("from", q.from.as_deref())?;
    let to = report_date("to", q.to.as_deref())?;
    let limit = q.limit.unwrap_or(10).clamp(1, 1000);
    let tenants = rows::top_spenders(&state.db, from.as_deref(), to.as_deref(), limit)
        .await?
        .into_iter()
        .map(|(tenant, requests, tokens, cost)| TopSpender {
            tenant,
            requests,
            tokens,
            cost_micro_usd: cost,
            cost_usd: micro_usd(cost),
        })
        .collect();
    Ok(Json(TopSpenders { tenants }))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RecentQuery {
    #[serde(default)]
    minutes: Option<i32>,
}

/// `GET /api/v1/reports/recent?minutes=15`: requests, errors and cost over the last minutes (1 to
/// 1440, default 15), in all and per upstream with its p95 latency and time to first token: the
/// overview's figures over a window long enough to read, from the same records as the cost report.
pub async fn recent_traffic(
    State(state): State<AppState>,
    caller: Caller,
    ApiQuery(q): ApiQuery<RecentQuery>,
) -> ApiResult<Json<RecentTraffic>> {
    caller.require(Role::Operator)?;
    let minutes = q.minutes.unwrap_or(15);
    if !(1..=1440).contains(&minutes) {
        return Err(ApiError::field("minutes", "from 1 to 1440"));
    }
    let rows = rows::recent(&state.db, minutes).await?;
    let sum = |f: fn(&rows::RecentRow) -> i64| rows.iter().map(f).sum::<i64>();
    Ok(Json(RecentTraffic {
        minutes: i64::from(minutes),
        requests: sum(|r| r.1),
        errors: sum(|r| r.2),
        cost_micro_usd: sum(|r| r.3),
        upstreams: rows
            .into_iter()
            .map(|(upstream, requests, errors, _, latency_p95_ms, ttft_p95_ms)| RecentUpstream {
                upstream,
                requests,
                errors,
                latency_p95_ms,
                ttft_p95_ms,
            })
            .collect(),
    }))
}

/// `GET /api/v1/reports/budgets`: every budget (tenants', keys', groups') against what its
/// subject spent in the current window (UTC day, week or month, from the rollups).
pub async fn budget_burn(State(state): State<AppState>, caller: Caller) -> ApiResult<Json<BudgetReport>> {
    caller.require(Role::Finance)?;
    Ok(Json(BudgetReport { budgets: budgets(&state.db).await?, timezone: "UTC".to_owned() }))
}

/// Every budget (each tenant's, key's and group's) against its current window's spend (the
/// report, and `/metrics`).
pub async fn budgets(db: &sqlx::PgPool) -> ApiResult<Vec<BudgetBurn>> {
    use ax_protocol::config::{BudgetSpec, BudgetWindow};
    let mut conn = db.acquire().await?;
    let tenants = crate::store::config::load_tenants(&mut conn, None).await?;
    let groups = crate::store::config::load_groups(&mut conn).await?;
    drop(conn);
    let spent = rows::window_spend(db).await?;
    // What the rows that `counts` picks spent in `b`'s window (and alias).
    let used = |b: &BudgetSpec, counts: &dyn Fn(&rows::Spend) -> bool| -> i64 {
        spent
            .iter()
            .filter(|r| counts(r) && b.alias.as_ref().is_none_or(|a| *a == r.alias))
            .map(|r| match b.window {
                BudgetWindow::Day => r.day,
                BudgetWindow::Week => r.week,
                BudgetWindow::Month => r.month,
            })
            .sum()
    };
    let burn = |scope: &str, tenant: &str, subject: Option<&str>, members: Vec<String>, b: &BudgetSpec, used: i64| {
        let cap = (b.usd * 1_000_000.0).round() as i64;
        BudgetBurn {
            scope: scope.to_owned(),
            tenant: tenant.to_owned(),
            subject: subject.map(str::to_owned),
            members,
            window: b.window.name().to_owned(),
            alias: b.alias.clone(),
            cap_usd: micro_usd(cap),
            spent_usd: micro_usd(used),
            spent_micro_usd: used,
            used_pct: if cap > 0 { (used as f64 * 1000.0 / cap as f64).round() / 10.0 } else { 0.0 },
            action: b.action.clone(),
            warn_at: b.warn_at,
        }
    };
    let mut out = Vec::new();
    for t in &tenants {
        for b in &t.budgets {
            out.push(burn("tenant", &t.id, None, Vec::new(), b, used(b, &|r| r.tenant == t.id)));
        }
        for k in &t.keys {
            for b in &k.budgets {
                let spent = used(b, &|r| r.tenant == t.id && r.key_id == k.id);
                out.push(burn("key", &t.id, Some(&k.id), Vec::new(), b, spent));
            }
        }
    }
    for g in &groups {
        let members: Vec<String> = tenants.iter().filter(|t| t.groups.contains(&g.id)).map(|t| t.id.clone()).collect();
        for b in &g.budgets {
            let spent = used(b, &|r| members.contains(&r.tenant));
            out.push(burn("group", "", Some(&g.id), members.clone(), b, spent));
        }
    }
    Ok(out)
}

/// Quotes a CSV field when needed (RFC 4180) and defuses spreadsheet formulas.
fn csv_field(s: &str) -> String {
    let s = if s.starts_with(['=', '+', '-', '@']) { format!("'{s}") } else { s.to_owned() };
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    const RECORD: &str = r#"{"request_id":"r1","started_at_ms":1796190000000,"tenant":"acme","key_id":"k","alias":"chat","upstream":"a","model":"m","status":200,"error_code":null,"prompt_tokens":3,"completion_tokens":4,"cost_micro_usd":11,"attempt_list":[{"attempt_id":"r1#1","upstream":"a","model":"m","error_code":null,"possibly_billed":false,"latency_ms":2}]}"#;

    proptest! {
        /// The ingest's reader of a node's lines: for any bytes, and for a valid record with bytes
        /// changed, it never panics, and what it accepts is storable (no NUL anywhere, a request
        /// id, a time Postgres can hold); what it refuses has a reason.
        #[test]
        fn any_line_is_read_or_refused_with_a_reason(
            junk in proptest::collection::vec(any::<u8>(), 0..400),
            edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..6),
        ) {
            let mut line = RECORD.as_bytes().to_vec();
            for (at, b) in edits {
                let i = at.index(line.len());
                line[i] = b;
            }
            for input in [&junk[..], &line[..]] {
                match super::read_record(input) {
                    Ok((r, raw)) => {
                        prop_assert!(!r.request_id.is_empty() && r.started_at_ms <= super::MAX_STARTED_MS);
                        prop_assert!(crate::error::nul_at(&raw, &mut String::new()).is_none());
                    }
                    Err((reason, _)) => prop_assert!(!reason.is_empty()),
                }
            }
        }
    }

    #[test]
    fn money_and_csv_formatting() {
        assert_eq!(super::micro_usd(1_234_567), "1.234567");
        assert_eq!(super::micro_usd(5), "0.000005");
        assert_eq!(super::csv_field("a,b"), "\"a,b\"");
        assert_eq!(super::csv_field("=cmd"), "'=cmd");
    }
}

// ---------- the request explorer ----------

#[derive(Deserialize)]
pub struct RequestsQuery {
    #[serde(default)]
    request_id: Option<String>,
    #[serde(default)]
    tenant: Option<String>,
    #[serde(default)]
    key: Option<String>,
    #[serde(default)]
    alias: Option<String>,
    #[serde(default)]
    upstream: Option<String>,
    #[serde(default)]
    status: Option<i32>,
    /// An error code, or `any`.
    #[serde(default)]
    error: Option<String>,
    #[serde(default)]
    from: Option<String>,
    #[serde(default)]
    to: Option<String>,
    /// The `next` cursor of the page before.
    #[serde(default)]
    before: Option<String>,
    #[serde(default)]
    limit: Option<i64>,
}

/// A time bound of the explorer, in Unix microseconds: an RFC 3339 timestamp, or a date and
/// time (or a date) without a zone, read as UTC; years 1970 to 9999.
fn explorer_time(field: &str, v: Option<&str>) -> ApiResult<Option<i64>> {
    let Some(v) = v.map(str::trim).filter(|v| !v.is_empty()) else { return Ok(None) };
    let civil = || {
        let dt = v
            .parse::<jiff::civil::DateTime>()
            .ok()
            .or_else(|| v.parse::<jiff::civil::Date>().ok().map(|d| d.at(0, 0, 0, 0)))?;
        jiff::tz::Offset::UTC.to_timestamp(dt).ok()
    };
    // 1970-01-01 to 9999-12-31, as Postgres and the UI read them.
    let ts =
        v.parse::<jiff::Timestamp>().ok().or_else(civil).filter(|t| (0..=253_402_300_799).contains(&t.as_second()));
    ts.map(|t| Some(t.as_microsecond())).ok_or_else(|| {
        ApiError::field(
            field,
            "a time as RFC 3339 (2026-12-03T15:00:00Z) or YYYY-MM-DD[THH:MM] in UTC, years 1970 to 9999",
        )
    })
}

/// 9999-12-31T23:59:59.999999Z in Unix microseconds: the explorer's times stay within what
/// Postgres and the UI read.
const MAX_US: i64 = 253_402_300_799_999_999;

/// RFC 3339 of Unix microseconds, UTC.
fn rfc3339(us: i64) -> String {
    jiff::Timestamp::from_microsecond(us).map(|t| t.to_string()).unwrap_or_default()
}

/// `GET /api/v1/requests`: the request explorer. Requests newest first (at most `limit`, 1 to
/// 500, default 100), narrowed by id, tenant, key, alias, upstream, status, error code (`any`
/// for every failure) and time (`from` inclusive, `to` exclusive); `next` pages back.
pub async fn list_requests(
    State(state): State<AppState>,
    caller: Caller,
    ApiQuery(q): ApiQuery<RequestsQuery>,
) -> ApiResult<Json<RequestList>> {
    caller.require(Role::Operator)?;
    let limit = q.limit.unwrap_or(100);
    if !(1..=500).contains(&limit) {
        return Err(ApiError::field("limit", "from 1 to 500"));
    }
    if q.status.is_some_and(|s| !(100..=599).contains(&s)) {
        return Err(ApiError::field("status", "an HTTP status, 100 to 599"));
    }
    let before = match q.before.as_deref() {
        None => None,
        Some(c) => Some(
            c.split_once('/')
                .and_then(|(us, id)| Some((us.parse::<i64>().ok().filter(|us| (0..=MAX_US).contains(us))?, id)))
                .ok_or_else(|| ApiError::field("before", "the `next` cursor of a page"))?,
        ),
    };
    fn given(v: &Option<String>) -> Option<&str> {
        v.as_deref().map(str::trim).filter(|v| !v.is_empty())
    }
    let filter = rows::RequestFilter {
        request_id: given(&q.request_id),
        tenant: given(&q.tenant),
        key_id: given(&q.key),
        alias: given(&q.alias),
        upstream: given(&q.upstream),
        status: q.status,
        error: given(&q.error),
        from_us: explorer_time("from", q.from.as_deref())?,
        to_us: explorer_time("to", q.to.as_deref())?,
        before,
        limit: limit + 1,
    };
    let mut found = rows::requests(&state.db, &filter).await?;
    let more = found.len() > limit as usize;
    found.truncate(limit as usize);
    let next = more.then(|| found.last().map(|r| format!("{}/{}", r.1, r.0))).flatten();
    let requests = found
        .into_iter()
        .map(|r| RequestRow {
            request_id: r.0,
            started_at: rfc3339(r.1),
            tenant: r.2,
            key_id: r.3,
            alias: r.4,
            upstream: r.5,
            model: r.6,
            status: r.7,
            error_code: r.8,
            attempts: r.9,
            stream: r.10,
            latency_ms: r.11,
            ttft_ms: r.12,
            prompt_tokens: r.13,
            completion_tokens: r.14,
            cost_micro_usd: r.15,
        })
        .collect();
    Ok(Json(RequestList { requests, next }))
}

/// `GET /api/v1/requests/{id}`: one request's record, its attempts in order.
pub async fn get_request(
    State(state): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
) -> ApiResult<Json<RequestDetail>> {
    caller.require(Role::Operator)?;
    let Some((us, node, record)) = rows::request(&state.db, &id).await? else {
        return Err(ApiError::new(axum::http::StatusCode::NOT_FOUND, "not_found", format!("no request {id}")));
    };
    let record: UsageRecord =
        serde_json::from_value(record).map_err(|e| ApiError::internal("a stored usage record", e))?;
    Ok(Json(RequestDetail { started_at: rfc3339(us), node, record }))
}
