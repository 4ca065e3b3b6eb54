//! Usage: the month-partitioned `usage_events` (one row per request, idempotent by request id),
//! the `usage_daily` rollups reports read, and `usage_dead_letters`.

use ax_protocol::usage::{UsageRecord, UNKNOWN_ALIAS};
use http::StatusCode;
use serde_json::Value;
use sqlx::{PgConnection, PgPool};

use crate::error::{ApiError, ApiResult};

/// A batch of records as the columns of one `unnest` statement.
#[derive(Default)]
pub struct Columns {
    pub request_id: Vec<String>,
    pub started_ms: Vec<i64>,
    pub tenant: Vec<String>,
    pub key_id: Vec<String>,
    pub alias: Vec<String>,
    pub upstream: Vec<String>,
    pub model: Vec<String>,
    pub status: Vec<i32>,
    pub error_code: Vec<Option<String>>,
    pub prompt: Vec<i64>,
    pub completion: Vec<i64>,
    pub cached: Vec<i64>,
    pub cache_write: Vec<i64>,
    pub cost: Vec<i64>,
    pub latency: Vec<i64>,
    pub record: Vec<Value>,
}

fn int(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

impl Columns {
    pub fn push(&mut self, r: UsageRecord, raw: Value) {
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

    pub fn len(&self) -> usize {
        self.request_id.len()
    }

    pub fn is_empty(&self) -> bool {
        self.request_id.is_empty()
    }

    /// Row `i` alone, for finding which row of a refused batch the database refuses.
    pub fn row(&self, i: usize) -> Self {
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

/// One statement: the records into `usage_events` (idempotent by request id), and exactly the new
/// rows folded into `usage_daily`. Returns how many rows were new.
pub async fn insert(conn: &mut PgConnection, cols: &Columns, node: &str) -> Result<i64, sqlx::Error> {
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

/// Whether the database refused the data rather than failed (SQLSTATE classes 22: data
/// exception, 23: integrity constraint, 54: program limit).
pub fn refused_data(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Database(d) if d.code().is_some_and(|c| ["22", "23", "54"].iter().any(|k| c.starts_with(k))))
}

/// Keeps a line the control plane cannot store, with why; `false` if the same line (by digest)
/// was kept before.
pub async fn dead_letter(
    conn: &mut PgConnection,
    node: &str,
    request_id: Option<&str>,
    reason: &str,
    line: &[u8],
    digest: &str,
) -> ApiResult<bool> {
    let added = sqlx::query!(
        "INSERT INTO usage_dead_letters (node, request_id, reason, line, digest) VALUES ($1, $2, $3, $4, $5)
             ON CONFLICT (digest) DO NOTHING",
        node,
        request_id,
        reason,
        line,
        digest,
    )
    .execute(&mut *conn)
    .await?;
    Ok(added.rows_affected() > 0)
}

/// One row of the cost report: (period, group, requests, errors, prompt, completion, cached,
/// cache write tokens, micro-USD).
pub type CostRow = (String, String, i64, i64, i64, i64, i64, i64, i64);

/// What the cost report groups by: a column of `usage_daily`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupBy {
    Tenant,
    Alias,
    Model,
    Key,
}

/// The cost report's rows: per `month` (else day) period and group, in the inclusive range of
/// `YYYY-MM-DD` days (default: the last 30), filtered by tenant, alias and model when given.
#[expect(clippy::too_many_arguments, reason = "the report's filters, each a bound parameter")]
pub async fn cost_rows(
    db: &PgPool,
    month: bool,
    by: GroupBy,
    from: Option<&str>,
    to: Option<&str>,
    tenant: Option<&str>,
    alias: Option<&str>,
    model: Option<&str>,
) -> ApiResult<Vec<CostRow>> {
    // The two names are chosen from fixed lists, never from the caller's text.
    let period = if month { "month" } else { "day" };
    let column = match by {
        GroupBy::Tenant => "tenant",
        GroupBy::Alias => "alias",
        GroupBy::Model => "model",
        GroupBy::Key => "key_id",
    };
    let mut q = sqlx::QueryBuilder::<sqlx::Postgres>::new("SELECT to_char(date_trunc('");
    q.push(period).push("', day), 'YYYY-MM-DD'), ").push(column).push(
        ", sum(requests)::bigint, sum(errors)::bigint,
                sum(prompt_tokens)::bigint, sum(completion_tokens)::bigint, sum(cached_tokens)::bigint,
                sum(cache_write_tokens)::bigint, sum(cost_micro_usd)::bigint
         FROM usage_daily
         WHERE day >= coalesce(",
    );
    q.push_bind(from).push("::date, current_date - 30) AND day <= coalesce(");
    q.push_bind(to).push("::date, current_date) AND (");
    q.push_bind(tenant).push("::text IS NULL OR tenant = ").push_bind(tenant).push(") AND (");
    q.push_bind(alias).push("::text IS NULL OR alias = ").push_bind(alias).push(") AND (");
    q.push_bind(model).push("::text IS NULL OR model = ").push_bind(model).push(") GROUP BY 1, 2 ORDER BY 1, 2");
    Ok(q.build_query_as().fetch_all(db).await?)
}

/// The tenants that spent most in the range: (tenant, requests, tokens, micro-USD).
pub async fn top_spenders(
    db: &PgPool,
    from: Option<&str>,
    to: Option<&str>,
    limit: i64,
) -> ApiResult<Vec<(String, i64, i64, i64)>> {
    Ok(sqlx::query!(
        r#"SELECT tenant, sum(requests)::bigint AS "requests!", sum(prompt_tokens + completion_tokens)::bigint AS "tokens!",
                  sum(cost_micro_usd)::bigint AS "cost!"
         FROM usage_daily
         WHERE day >= coalesce($1::date, current_date - 30) AND day <= coalesce($2::date, current_date)
         GROUP BY tenant ORDER BY 4 DESC, 1 LIMIT $3"#,
        from as _,
        to as _,
        limit,
    )
    .fetch_all(db)
    .await?
    .into_iter()
    .map(|r| (r.tenant, r.requests, r.tokens, r.cost))
    .collect())
}

/// What each (tenant, alias, key) spent in the current UTC day, week (from Monday) and month,
/// from the daily rollups.
pub struct Spend {
    pub tenant: String,
    pub alias: String,
    pub key_id: String,
    pub day: i64,
    pub week: i64,
    pub month: i64,
}

pub async fn window_spend(db: &PgPool) -> ApiResult<Vec<Spend>> {
    Ok(sqlx::query!(
        r#"WITH now AS (SELECT (now() AT TIME ZONE 'UTC')::date AS today)
           SELECT tenant, alias, key_id,
                coalesce(sum(cost_micro_usd) FILTER (WHERE day = today), 0)::bigint AS "day!",
                coalesce(sum(cost_micro_usd) FILTER (WHERE day >= date_trunc('week', today)::date), 0)::bigint AS "week!",
                coalesce(sum(cost_micro_usd) FILTER (WHERE day >= date_trunc('month', today)::date), 0)::bigint AS "month!"
         FROM usage_daily, now
         WHERE day >= least(date_trunc('month', today), date_trunc('week', today))::date
         GROUP BY tenant, alias, key_id"#
    )
    .fetch_all(db)
    .await?
    .into_iter()
    .map(|r| Spend { tenant: r.tenant, alias: r.alias, key_id: r.key_id, day: r.day, week: r.week, month: r.month })
    .collect())
}

/// An alias's traffic over the last 7 days: (requests, prompt tokens, completion tokens).
/// An alias's traffic since yesterday 00:00 UTC from the daily rollups: requests, prompt and
/// completion tokens, and the hours since then (24 to 48).
pub async fn alias_recent(db: &PgPool, alias: &str) -> ApiResult<(i64, i64, i64, f64)> {
    let r = sqlx::query!(
        r#"SELECT coalesce(sum(requests), 0)::bigint AS "requests!", coalesce(sum(prompt_tokens), 0)::bigint AS "prompt!",
                  coalesce(sum(completion_tokens), 0)::bigint AS "completion!",
                  (extract(epoch FROM now() - (((now() AT TIME ZONE 'UTC')::date - 1)::timestamp AT TIME ZONE 'UTC')) / 3600)::float8 AS "hours!"
           FROM usage_daily WHERE alias = $1 AND day >= (now() AT TIME ZONE 'UTC')::date - 1"#,
        alias,
    )
    .fetch_one(db)
    .await?;
    Ok((r.requests, r.prompt, r.completion, r.hours))
}

pub async fn alias_week(db: &PgPool, alias: &str) -> ApiResult<(i64, i64, i64)> {
    let r = sqlx::query!(
        r#"SELECT coalesce(sum(requests), 0)::bigint AS "requests!", coalesce(sum(prompt_tokens), 0)::bigint AS "prompt!",
                  coalesce(sum(completion_tokens), 0)::bigint AS "completion!"
           FROM usage_daily WHERE alias = $1 AND day > current_date - 7"#,
        alias,
    )
    .fetch_one(db)
    .await?;
    Ok((r.requests, r.prompt, r.completion))
}

/// One upstream's recent traffic: (upstream, requests, errors, micro-USD, p95 latency ms, p95 time
/// to first token ms).
pub type RecentRow = (String, i64, i64, i64, Option<f64>, Option<f64>);

/// Requests, errors, cost and p95 latencies per upstream over the last `minutes` (by
/// `started_at`, indexed).
pub async fn recent(db: &PgPool, minutes: i32) -> ApiResult<Vec<RecentRow>> {
    Ok(sqlx::query!(
        r#"SELECT upstream, count(*) AS "requests!", count(*) FILTER (WHERE error_code IS NOT NULL) AS "errors!",
                  coalesce(sum(cost_micro_usd), 0)::bigint AS "cost!",
                  percentile_cont(0.95) WITHIN GROUP (ORDER BY latency_ms) AS p95,
                  percentile_cont(0.95) WITHIN GROUP (ORDER BY (record->>'ttft_ms')::float8) AS ttft_p95
         FROM usage_events WHERE started_at > now() - make_interval(mins => $1)
         GROUP BY upstream ORDER BY upstream COLLATE "C""#,
        minutes,
    )
    .fetch_all(db)
    .await?
    .into_iter()
    .map(|r| (r.upstream, r.requests, r.errors, r.cost, r.p95, r.ttft_p95))
    .collect())
}

/// What the request explorer looks for; every field narrows the search.
#[derive(Debug, Default)]
pub struct RequestFilter<'a> {
    pub request_id: Option<&'a str>,
    pub tenant: Option<&'a str>,
    pub key_id: Option<&'a str>,
    pub alias: Option<&'a str>,
    pub upstream: Option<&'a str>,
    pub status: Option<i32>,
    /// An error code, or `any` for every failed request.
    pub error: Option<&'a str>,
    /// Unix microseconds: `from` inclusive, `to` exclusive.
    pub from_us: Option<i64>,
    pub to_us: Option<i64>,
    /// The previous page's last row, (Unix microseconds, request id): rows strictly older.
    pub before: Option<(i64, &'a str)>,
    pub limit: i64,
}

/// A listed request: (id, started at in Unix microseconds, tenant, key, alias, upstream, model,
/// status, error code, attempts, stream, latency ms, TTFT ms, prompt tokens, completion tokens,
/// micro-USD).
pub type RequestRowDb = (
    String,
    i64,
    String,
    String,
    String,
    String,
    String,
    i32,
    Option<String>,
    i64,
    bool,
    i64,
    Option<i64>,
    i64,
    i64,
    i64,
);

/// The explorer's requests, newest first, at most `limit` (the tenant's, key's and failed ones
/// through their `(…, started_at)` indexes, the rest walking `usage_events_started` back from
/// the newest).
pub async fn requests(db: &PgPool, f: &RequestFilter<'_>) -> ApiResult<Vec<RequestRowDb>> {
    let mut q = sqlx::QueryBuilder::<sqlx::Postgres>::new(
        "SELECT request_id, (extract(epoch FROM started_at) * 1000000)::bigint, tenant, key_id, alias, upstream, \
         model, status, error_code, coalesce((record->>'attempts')::bigint, 1), \
         coalesce((record->>'stream')::boolean, false), latency_ms, (record->>'ttft_ms')::bigint, prompt_tokens, \
         completion_tokens, cost_micro_usd FROM usage_events WHERE true",
    );
    for (column, value) in [
        ("request_id", f.request_id),
        ("tenant", f.tenant),
        ("key_id", f.key_id),
        ("alias", f.alias),
        ("upstream", f.upstream),
    ] {
        if let Some(v) = value {
            q.push(" AND ").push(column).push(" = ").push_bind(v.to_owned());
        }
    }
    if let Some(s) = f.status {
        q.push(" AND status = ").push_bind(s);
    }
    match f.error {
        Some("any") => {
            q.push(" AND error_code IS NOT NULL");
        }
        Some(code) => {
            q.push(" AND error_code = ").push_bind(code.to_owned());
        }
        None => {}
    }
    let at = |us| format!("timestamptz 'epoch' + {us}::bigint * interval '1 microsecond'");
    if let Some(us) = f.from_us {
        q.push(" AND started_at >= ").push(at(us));
    }
    if let Some(us) = f.to_us {
        q.push(" AND started_at < ").push(at(us));
    }
    if let Some((us, id)) = f.before {
        q.push(" AND (started_at, request_id) < (").push(at(us)).push(", ").push_bind(id.to_owned()).push(")");
    }
    q.push(" ORDER BY started_at DESC, request_id DESC LIMIT ").push_bind(f.limit);
    // A combination of filters that matches almost nothing can walk an index far back; the
    // search is cut off rather than holding a connection (and the caller) for seconds.
    let mut tx = db.begin().await?;
    sqlx::query(SEARCH_TIMEOUT).execute(&mut *tx).await?;
    let rows = q.build_query_as().fetch_all(&mut *tx).await.map_err(|e| match &e {
        sqlx::Error::Database(d) if d.code().as_deref() == Some("57014") => ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "search_too_broad",
            "this search took longer than 3 s: narrow it with a time range (from, to), a tenant or a key",
        ),
        _ => ApiError::from(e),
    })?;
    tx.rollback().await?;
    Ok(rows)
}

/// How long one explorer search may run (Postgres cancels it past that: SQLSTATE 57014).
const SEARCH_TIMEOUT: &str = "SET LOCAL statement_timeout = '3s'";

/// One request's newest record: (started at in Unix microseconds, node, record).
pub async fn request(db: &PgPool, request_id: &str) -> ApiResult<Option<(i64, String, Value)>> {
    Ok(sqlx::query_as(
        "SELECT (extract(epoch FROM started_at) * 1000000)::bigint, node, record FROM usage_events \
         WHERE request_id = $1 ORDER BY started_at DESC LIMIT 1",
    )
    .bind(request_id)
    .fetch_optional(db)
    .await?)
}
