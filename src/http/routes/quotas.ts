import { Elysia, t } from "elysia";
import type { QuotaAdmin, QuotaListing, QuotaSubject } from "../../chat/quota-admin";
import { InvalidInput } from "../../errors";
import { QUOTA_PERIODS } from "../../vocabulary";
import { requireKey } from "../auth";
import type { QuotaEntryJson, QuotaList } from "../contract";
import { type BodyLimits, jsonBody } from "../json-body";
import { errorResponses, jsonResponse } from "../openapi";
import { integer } from "../sampling-fields";

const SUBJECT_RULE = "the path names a user id (an integer) or default";

const quotaRequest = t.Object({
  tokens: integer({ minimum: 0, maximum: Number.MAX_SAFE_INTEGER, error: "tokens must be an integer from 0" }),
  period: t.Union(
    QUOTA_PERIODS.map((period) => t.Literal(period)),
    { error: "period must be day or month" },
  ),
});

function subjectOf(raw: string): QuotaSubject {
  if (raw === "default") return null;
  if (!/^[1-9]\d{0,15}$/.test(raw) || !Number.isSafeInteger(Number(raw))) throw new InvalidInput("user", SUBJECT_RULE);
  return { id: Number(raw) };
}

const entryJson = (entry: QuotaListing): QuotaEntryJson => ({
  user_id: entry.userId,
  user: entry.user,
  limit: entry.tokens,
  period: entry.period,
  used: entry.used ?? null,
  remaining: entry.remaining ?? null,
  resets_at: new Date(entry.resetsAt).toISOString(),
});

export interface QuotaRouteDeps {
  admin: QuotaAdmin;
  body: BodyLimits;
}

/** Token quotas, for admin keys: as `parley quota` does from the command line. */
export const quotaRoutes = ({ admin, body }: QuotaRouteDeps) =>
  new Elysia({ name: "parley/routes/quotas" })
    .use(requireKey)
    .get("/api/v1.0/admin/quotas", async (): Promise<QuotaList> => ({ data: (await admin.list()).map(entryJson) }), {
      auth: "admin",
      detail: {
        summary: "Token quotas: the default, then users' own, with each user's standing this period",
        responses: { "200": jsonResponse("The quotas", "QuotaList"), ...errorResponses("unauthorized", "forbidden", "rate_limited") },
      },
    })
    .put("/api/v1.0/admin/quotas/:user", async ({ params, body: rule }) => entryJson(await admin.set(subjectOf(params.user), rule)), {
      auth: "admin",
      params: t.Object({ user: t.String({ description: "A user id, or `default` for every user without a quota of their own" }) }),
      body: quotaRequest,
      parse: jsonBody(body),
      detail: {
        summary: "Set a user's token quota (prompt and completion tokens per UTC day or month), or the default",
        responses: {
          "200": jsonResponse("The quota as set", "QuotaEntry"),
          ...errorResponses("invalid_json", "unauthorized", "forbidden", "payload_too_large", "unsupported_media_type", "invalid_input", "rate_limited"),
          "404": { ...errorResponses("not_found")["404"], description: "not_found: no user by this id" },
        },
      },
    })
    .delete(
      "/api/v1.0/admin/quotas/:user",
      async ({ params, set }) => {
        await admin.clear(subjectOf(params.user));
        set.status = 204;
      },
      {
        auth: "admin",
        params: t.Object({ user: t.String({ description: "A user id, or `default`" }) }),
        detail: {
          summary: "Clear a user's own quota (the default then applies), or the default (no limit then)",
          responses: {
            "204": { description: "Cleared" },
            ...errorResponses("unauthorized", "forbidden", "invalid_input", "rate_limited"),
            "404": { ...errorResponses("not_found")["404"], description: "not_found: no such user, or no such quota" },
          },
        },
      },
    );
