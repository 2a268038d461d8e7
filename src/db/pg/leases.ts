import { and, eq, isNull, lt, or, sql } from "drizzle-orm";
import type { ConversationLeases } from "../storage";
import type { Db } from "./client";
import { conversations, NOW_MS } from "./schema";

/** Leases kept on the conversation's row, timed by the database's clock (the nodes' may differ). */
export class PgConversationLeases implements ConversationLeases {
  constructor(private readonly db: Db) {}

  async lease(conversationId: number, owner: string, ttlMs: number): Promise<boolean> {
    const rows = await this.db
      .update(conversations)
      .set({ leaseOwner: owner, leaseExpiresAt: sql`${NOW_MS} + ${ttlMs}` })
      .where(
        and(
          eq(conversations.id, conversationId),
          or(isNull(conversations.leaseOwner), eq(conversations.leaseOwner, owner), lt(conversations.leaseExpiresAt, NOW_MS)),
        ),
      )
      .returning({ id: conversations.id });
    return rows.length > 0;
  }

  async release(conversationId: number, owner: string): Promise<void> {
    await this.db
      .update(conversations)
      .set({ leaseOwner: null, leaseExpiresAt: null })
      .where(and(eq(conversations.id, conversationId), eq(conversations.leaseOwner, owner)));
  }
}
