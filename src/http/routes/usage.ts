import { Elysia, t } from "elysia";
import { usageDay } from "../../chat/turn-runner";
import type { UsageStore } from "../../db/storage";
import { requireKey } from "../auth";
import { type UsageReport, USAGE_DAYS } from "../contract";
import { listedUser } from "../listing-query";
import { errorResponses, jsonResponse } from "../openapi";

const DAY_MS = 86_400_000;

export interface UsageRouteDeps {
  usage: Pick<UsageStore, "days">;
}

/** What a user's replies used: tokens by UTC day, the caller's own (any user's for an admin key). */
export const usageRoutes = ({ usage }: UsageRouteDeps) =>
  new Elysia({ name: "parley/routes/usage" }).use(requireKey).get(
    "/api/v1.0/usage",
    async ({ query, principal }): Promise<UsageReport> => {
      const userId = listedUser(query, principal, "usage");
      const days = await usage.days(userId, usageDay(Date.now() - (USAGE_DAYS - 1) * DAY_MS));
      return {
        user_id: userId,
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
        summary: `Tokens a user's replies used, by UTC day, over the last ${USAGE_DAYS} days`,
        responses: {
          "200": jsonResponse("Tokens by day", "UsageReport"),
          ...errorResponses("unauthorized", "forbidden", "invalid_input", "rate_limited"),
        },
      },
    },
  );
