/** What both databases' quota stores share beyond their SQL: the default's row, and how a hold is granted. */
import type { HoldRequest, QuotaEntry, QuotaStanding } from "./storage";

/** The row of the default quota: no user has id 0. */
export const DEFAULT_QUOTA_ROW = 0;

/** The row holding a user's quota, or the default's (`null`). */
export const quotaRow = (userId: number | null) => userId ?? DEFAULT_QUOTA_ROW;

export const quotaEntry = (row: QuotaEntry & { userId: number }): QuotaEntry => ({ ...row, userId: row.userId === DEFAULT_QUOTA_ROW ? null : row.userId });

/** What is left up to `want` when at least `need` is, else nothing; the standing with the hold. */
export function grant({ limit, need, want }: HoldRequest, { used, held }: QuotaStanding): QuotaStanding & { granted: number } {
  const left = limit - used - held;
  const granted = left >= need ? Math.min(want, left) : 0;
  return { used, held: held + granted, granted };
}
