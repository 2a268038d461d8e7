import { Elysia, t } from "elysia";
import { type TokenLedger, usageDay } from "../../chat/token-ledger";
import type { UsageStore } from "../../db/storage";
import { requireKey } from "../auth";
import { USAGE_DAYS, type UsageReport } from "../contract";
import { listedUser } from "../listing-query";
import { errorResponses, jsonResponse } from "../openapi";
import { quotaJson } from "../present";
import { tokenQuotaHeaders } from "../rate-limit";

const DAY_MS = 86_400_000;

export interface UsageRouteDeps {
  usage: Pick<UsageStore, "days">;
  ledger: TokenLedger;
}

/** What a user's replies used: this period's budget and tokens by UTC day, the caller's own (any user's for an admin key). */
export const usageRoutes = ({ usage, ledger }: UsageRouteDeps) =>
  new Elysia({ name: "parley/routes/usage" }).use(requireKey).get(
    "/api/v1.0/usage",
    async ({ query, principal, set }): Promise<UsageReport> => {
      const userId = listedUser(query, principal, "usage");
      const now = ledger.now();
      const [days, quota] = await Promise.all([usage.days(userId, usageDay(now - (USAGE_DAYS - 1) * DAY_MS)), ledger.state(userId)]);
      if (quota) Object.assign(set.headers, tokenQuotaHeaders(quota));
      return {
        user_id: userId,
        quota: quota ? quotaJson(quota) : null,
        days: days.map(({ day, promptTokens, completionTokens }) => ({
          date: day,
          prompt_tokens: promptTokens,
          completion_tokens: completionTokens,
          total_tokens: promptTokens + completionTokens,
        })),
      };
    },
    {
      auth: "key",
      query: t.Object({ user_id: t.Optional(t.String({ description: "`:eq:<int>` or `<int>`; default: the key's own user (others: admin keys only)" })) }),
      detail: {
        summary: `A user's token budget this period, and tokens their replies used by UTC day over the last ${USAGE_DAYS} days`,
        responses: {
          "200": jsonResponse("Budget and tokens by day (X-Quota-* headers when a quota applies)", "UsageReport"),
          ...errorResponses("unauthorized", "forbidden", "invalid_input", "rate_limited"),
        },
      },
    },
  );
