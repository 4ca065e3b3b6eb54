//! Usage ingestion and cost reports.
//!
//! Data planes POST their spool in batches (`/api/v1/usage`, NDJSON of `UsageRecord`s, node
//! token). One batch is one statement in one transaction: `unnest` the columns, insert into the
//! month-partitioned `usage_events` with `ON CONFLICT DO NOTHING` (idempotent by request id), and
//! fold exactly the rows that were new into `usage_daily`. The 200 is the acknowledgement: only
//! then does the data plane delete the records from its spool. Reports read the rollups.

use ax_protocol::admin::{BudgetBurn, BudgetReport, CostReport, CostRow};
use ax_protocol::usage::{UsageRecord, UNKNOWN_ALIAS};
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use crate::auth::{Caller, Role};
use crate::error::{ApiError, ApiResult};
use crate::extract::{ApiBody, ApiQuery};
use crate::AppState;

#[derive(Default)]
struct Columns {
    request_id: Vec<String>,
    started_ms: Vec<i64>,
    tenant: Vec<String>,
    key_id: Vec<String>,
    alias: Vec<String>,
    upstream: Vec<String>,
    model: Vec<String>,
    status: Vec<i32>,
    error_code: Vec<Option<String>>,
    prompt: Vec<i64>,
    completion: Vec<i64>,
    cached: Vec<i64>,
    cache_write: Vec<i64>,
    cost: Vec<i64>,
    latency: Vec<i64>,
    record: Vec<Value>,
}

fn int(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

impl Columns {
    fn push(&mut self, r: UsageRecord, raw: Value) {
        // A data plane older than the fixed label may send a made-up model name: it never becomes
        // a report group.
        let alias = if r.error_code.as_deref() == Some("model_not_found") { UNKNOWN_ALIAS.to_owned() } else { r.alias };
        self.request_id.push(r.request_id);
        self.started_ms.push(int(r.started_at_ms));
        self.tenant.push(r.tenant);
        self.key_id.push(r.key_id);
        self.alias.push(alias);
        self.upstream.push(r.upstream);
        self.model.push(r.model);
        self.status.push(i32::from(r.status));
        self.error_code.push(r.error_code);
        self.prompt.push(int(r.prompt_tokens));
        self.completion.push(int(r.completion_tokens));
        self.cached.push(int(r.cached_prompt_tokens));
        self.cache_write.push(int(r.cache_write_tokens));
        self.cost.push(int(r.cost_micro_usd.unwrap_or(0)));
        self.latency.push(int(r.latency_ms));
        self.record.push(raw);
    }

    fn len(&self) -> usize {
        self.request_id.len()
    }

    /// Row `i` alone, for finding which row of a refused batch the database refuses.
    fn row(&self, i: usize) -> Self {
        Self {
            request_id: vec![self.request_id[i].clone()],
            started_ms: vec![self.started_ms[i]],
            tenant: vec![self.tenant[i].clone()],
            key_id: vec![self.key_id[i].clone()],
            alias: vec![self.alias[i].clone()],
            upstream: vec![self.upstream[i].clone()],
            model: vec![self.model[i].clone()],
            status: vec![self.status[i]],
            error_code: vec![self.error_code[i].clone()],
            prompt: vec![self.prompt[i]],
            completion: vec![self.completion[i]],
            cached: vec![self.cached[i]],
            cache_write: vec![self.cache_write[i]],
            cost: vec![self.cost[i]],
            latency: vec![self.latency[i]],
            record: vec![self.record[i].clone()],
        }
    }
}

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

/// Whether the database refused the data rather than failed (SQLSTATE classes 22: data
/// exception, 23: integrity constraint, 54: program limit): the batch's records are then judged
/// one by one; any other error fails the batch, and the data plane offers it again.
fn refused_data(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Database(d) if d.code().is_some_and(|c| ["22", "23", "54"].iter().any(|k| c.starts_with(k))))
}

/// `POST /api/v1/usage`: one batch from one data plane. Each record is judged on its own: one the
/// control plane cannot read or the database refuses goes to `usage_dead_letters` with the reason
/// (and is counted), the rest are stored, and the batch is answered 200 so the node's spool moves
/// on. Only a failure of the database itself answers 5xx (the batch is offered again).
pub async fn ingest(
    State(state): State<AppState>,
    headers: HeaderMap,
    ApiBody(body): ApiBody,
) -> ApiResult<Json<Value>> {
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
    if cols.len() > 0 {
        let mut batch = sqlx::Connection::begin(&mut *tx).await?;
        match insert(&mut batch, &cols, &node).await {
            Ok(n) => {
                batch.commit().await?;
                inserted = n;
            }
            Err(e) if refused_data(&e) => {
                batch.rollback().await?;
                tracing::warn!(node = %node, error = %e, "a usage batch was refused; storing its records one by one");
                for (i, line) in lines_kept.iter().enumerate() {
                    let mut one = sqlx::Connection::begin(&mut *tx).await?;
                    match insert(&mut one, &cols.row(i), &node).await {
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
        let added = sqlx::query!(
            "INSERT INTO usage_dead_letters (node, request_id, reason, line, digest) VALUES ($1, $2, $3, $4, $5)
             ON CONFLICT (digest) DO NOTHING",
            node,
            d.request_id,
            reason,
            d.line,
            hex::encode(digest.finalize()),
        )
        .execute(&mut *tx)
        .await?;
        dead_lettered += added.rows_affected();
    }
    tx.commit().await?;
    if dead_lettered > 0 {
        metrics::counter!("ax_usage_dead_letters_total", "node" => node.clone()).increment(dead_lettered);
    }
    let refused = dead.len() - unreadable;
    Ok(Json(json!({
        "received": received,
        "inserted": inserted,
        "duplicates": (cols.len() - refused) as i64 - inserted,
        "dead_lettered": dead.len(),
    })))
}

/// One statement: the records into `usage_events` (idempotent by request id), and exactly the new
/// rows folded into `usage_daily`. Returns how many rows were new.
async fn insert(conn: &mut sqlx::PgConnection, cols: &Columns, node: &str) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar!(
        r#"
WITH input AS (
    SELECT * FROM unnest($1::text[], $2::bigint[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[],
                         $8::int[], $9::text[], $10::bigint[], $11::bigint[], $12::bigint[], $13::bigint[],
                         $14::bigint[], $15::bigint[], $16::jsonb[])
        AS t(request_id, started_ms, tenant, key_id, alias, upstream, model, status, error_code,
             prompt, completion, cached, cache_write, cost, latency, record)
), ins AS (
    INSERT INTO usage_events (request_id, started_at, tenant, key_id, alias, upstream, model, status, error_code,
                              prompt_tokens, completion_tokens, cached_tokens, cache_write_tokens, cost_micro_usd,
                              latency_ms, record, node)
    SELECT request_id, to_timestamp(started_ms / 1000.0), tenant, key_id, alias, upstream, model, status, error_code,
           prompt, completion, cached, cache_write, cost, latency, record, $17
    FROM input
    ON CONFLICT DO NOTHING
    RETURNING started_at, tenant, alias, model, key_id, error_code, prompt_tokens, completion_tokens, cached_tokens,
              cache_write_tokens, cost_micro_usd
), rolled AS (
    INSERT INTO usage_daily AS d (day, tenant, alias, model, key_id, requests, errors, prompt_tokens,
                                  completion_tokens, cached_tokens, cache_write_tokens, cost_micro_usd)
    SELECT (started_at AT TIME ZONE 'UTC')::date, tenant, alias, model, key_id, count(*),
           count(*) FILTER (WHERE error_code IS NOT NULL), sum(prompt_tokens)::bigint, sum(completion_tokens)::bigint,
           sum(cached_tokens)::bigint, sum(cache_write_tokens)::bigint, sum(cost_micro_usd)::bigint
    FROM ins GROUP BY 1, 2, 3, 4, 5
    ON CONFLICT (day, tenant, alias, model, key_id) DO UPDATE SET
        requests = d.requests + excluded.requests,
        errors = d.errors + excluded.errors,
        prompt_tokens = d.prompt_tokens + excluded.prompt_tokens,
        completion_tokens = d.completion_tokens + excluded.completion_tokens,
        cached_tokens = d.cached_tokens + excluded.cached_tokens,
        cache_write_tokens = d.cache_write_tokens + excluded.cache_write_tokens,
        cost_micro_usd = d.cost_micro_usd + excluded.cost_micro_usd
    RETURNING 1
)
SELECT (SELECT count(*) FROM ins) AS "inserted!""#,
        &cols.request_id,
        &cols.started_ms,
        &cols.tenant,
        &cols.key_id,
        &cols.alias,
        &cols.upstream,
        &cols.model,
        &cols.status,
        &cols.error_code as _,
        &cols.prompt,
        &cols.completion,
        &cols.cached,
        &cols.cache_write,
        &cols.cost,
        &cols.latency,
        &cols.record,
        node,
    )
    .fetch_one(conn)
    .await
}

/// Creates the monthly partitions around now (last month to two months ahead), so rows land in
/// their month and old months can be detached or dropped whole.
pub async fn ensure_partitions(db: &sqlx::PgPool) -> Result<(), sqlx::Error> {
    for offset in -1..=2i32 {
        let month = sqlx::query!(
            r#"SELECT 'usage_events_' || to_char(m, 'YYYY_MM') AS "name!", to_char(m, 'YYYY-MM-DD') AS "from!",
                      to_char(m + interval '1 month', 'YYYY-MM-DD') AS "to!"
             FROM (SELECT date_trunc('month', now() AT TIME ZONE 'UTC') + make_interval(months => $1) AS m) x"#,
            offset,
        )
        .fetch_one(db)
        .await?;
        let (name, from, to) = (month.name, month.from, month.to);
        let exists =
            sqlx::query_scalar!(r#"SELECT to_regclass($1) IS NOT NULL AS "exists!""#, name).fetch_one(db).await?;
        if !exists {
            let ddl = format!(
                "CREATE TABLE IF NOT EXISTS {name} PARTITION OF usage_events FOR VALUES FROM ('{from}') TO ('{to}')"
            );
            if let Err(e) = sqlx::query(&ddl).execute(db).await {
                // Rows of that month already sit in the default partition; they stay readable there.
                tracing::warn!(error = %e, partition = %name, "cannot create usage partition");
            }
        }
    }
    Ok(())
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
    let by = match q.by.as_deref().unwrap_or("tenant") {
        "tenant" => "tenant",
        "alias" => "alias",
        "model" => "model",
        "key" => "key_id",
        _ => return Err(ApiError::field("by", "tenant, alias, model or key")),
    };
    let mut q = q;
    q.from = report_date("from", q.from.as_deref())?;
    q.to = report_date("to", q.to.as_deref())?;
    let sql = format!(
        "SELECT to_char(date_trunc('{period}', day), 'YYYY-MM-DD'), {by}, sum(requests)::bigint, sum(errors)::bigint,
                sum(prompt_tokens)::bigint, sum(completion_tokens)::bigint, sum(cached_tokens)::bigint,
                sum(cache_write_tokens)::bigint, sum(cost_micro_usd)::bigint
         FROM usage_daily
         WHERE day >= coalesce($1::date, current_date - 30) AND day <= coalesce($2::date, current_date)
           AND ($3::text IS NULL OR tenant = $3) AND ($4::text IS NULL OR alias = $4) AND ($5::text IS NULL OR model = $5)
         GROUP BY 1, 2 ORDER BY 1, 2"
    );
    #[allow(clippy::type_complexity)]
    let rows: Vec<(String, String, i64, i64, i64, i64, i64, i64, i64)> = sqlx::query_as(&sql)
        .bind(&q.from)
        .bind(&q.to)
        .bind(&q.tenant)
        .bind(&q.alias)
        .bind(&q.model)
        .fetch_all(&state.db)
        .await?;
    let group = if by == "key_id" { "key" } else { by };
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
) -> ApiResult<Json<Value>> {
    caller.require(Role::Finance)?;
    let mut q = q;
    q.from = report_date("from", q.from.as_deref())?;
    q.to = report_date("to", q.to.as_deref())?;
    let rows = sqlx::query!(
        r#"SELECT tenant, sum(requests)::bigint AS "requests!", sum(prompt_tokens + completion_tokens)::bigint AS "tokens!",
                  sum(cost_micro_usd)::bigint AS "cost!"
         FROM usage_daily
         WHERE day >= coalesce($1::date, current_date - 30) AND day <= coalesce($2::date, current_date)
         GROUP BY tenant ORDER BY 4 DESC, 1 LIMIT $3"#,
        q.from as _,
        q.to as _,
        q.limit.unwrap_or(10).clamp(1, 1000),
    )
    .fetch_all(&state.db)
    .await?
    .into_iter()
    .map(|r| (r.tenant, r.requests, r.tokens, r.cost));
    let list: Vec<Value> = rows
        .into_iter()
        .map(|(t, req, tok, cost)| json!({ "tenant": t, "requests": req, "tokens": tok, "cost_micro_usd": cost, "cost_usd": micro_usd(cost) }))
        .collect();
    Ok(Json(json!({ "tenants": list })))
}

/// `GET /api/v1/reports/budgets`: every tenant budget against what the tenant spent in the
/// current window (UTC day or month, from the rollups).
pub async fn budget_burn(State(state): State<AppState>, caller: Caller) -> ApiResult<Json<Value>> {
    caller.require(Role::Finance)?;
    let tenants = sqlx::query!("SELECT id, spec FROM tenants ORDER BY id").fetch_all(&state.db).await?;
    let spent: Vec<(String, String, i64, i64)> = sqlx::query!(
        r#"SELECT tenant, alias,
                coalesce(sum(cost_micro_usd) FILTER (WHERE day = (now() AT TIME ZONE 'UTC')::date), 0)::bigint AS "today!",
                coalesce(sum(cost_micro_usd), 0)::bigint AS "month!"
         FROM usage_daily WHERE day >= date_trunc('month', now() AT TIME ZONE 'UTC')::date
         GROUP BY tenant, alias"#
    )
    .fetch_all(&state.db)
    .await?
    .into_iter()
    .map(|r| (r.tenant, r.alias, r.today, r.month))
    .collect();
    let mut out = Vec::new();
    for (tenant, spec) in tenants.into_iter().map(|r| (r.id, r.spec)) {
        let Ok(t) = serde_json::from_value::<ax_protocol::config::TenantSpec>(spec) else { continue };
        for b in &t.budgets {
            let month = b.window == ax_protocol::config::BudgetWindow::Month;
            let used: i64 = spent
                .iter()
                .filter(|r| r.0 == tenant && b.alias.as_ref().is_none_or(|a| *a == r.1))
                .map(|r| if month { r.3 } else { r.2 })
                .sum();
            let cap = (b.usd * 1_000_000.0).round() as i64;
            out.push(BudgetBurn {
                tenant: tenant.clone(),
                window: if month { "month" } else { "day" }.to_owned(),
                alias: b.alias.clone(),
                cap_usd: micro_usd(cap),
                spent_usd: micro_usd(used),
                spent_micro_usd: used,
                used_pct: if cap > 0 { (used as f64 * 1000.0 / cap as f64).round() / 10.0 } else { 0.0 },
                action: b.action.clone(),
                warn_at: b.warn_at,
            });
        }
    }
    Ok(Json(json!(BudgetReport { budgets: out, timezone: "UTC".to_owned() })))
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
