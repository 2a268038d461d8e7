/**
 * Conversations as OpenAI's Conversations API sees them: a Parley conversation (its id is the
 * native `conversation_id`) with metadata, and its rows as items. Changes wait for the
 * conversation's turns, as a turn's own writes do; reads do not.
 */
import type { ConversationStore } from "../db/storage";
import type { ConversationItem, ConversationRow, StoredConversation } from "../db/types";
import { InvalidInput, NotFound } from "../errors";
import { itemRows, messageOfThought, rowItems } from "./conversation-items";
import { type ItemInput, type ItemPage, type ItemPageQuery, inputItems, newStem, pageOf } from "./items";
import type { ChatService } from "./service";
import type { EngineSource } from "./turn-runner";

const newConversationId = () => `conv_${crypto.randomUUID().replaceAll("-", "")}`;

const notFound = (id: string) => new NotFound(`no conversation ${JSON.stringify(id)}`);

/** The rows that may show an item: its own, and for a thought's `rs_` id its message's (`messageOfThought`). */
const rowIdsOf = (itemId: string): string[] => (itemId.startsWith("rs_") ? [itemId, messageOfThought(itemId)] : [itemId]);

export class ConversationItemService {
  constructor(
    private readonly conversations: ConversationStore,
    private readonly chat: ChatService,
    private readonly engines: EngineSource,
  ) {}

  /** A new conversation of the user's, with its first items. */
  async create(userId: number, items: ItemInput[], metadata: Record<string, string>): Promise<StoredConversation> {
    const id = newConversationId();
    const created = await this.conversations.findOrCreate(userId, id, metadata);
    await this.conversations.addMessages(created, itemRows(inputItems(newStem(), items)));
    return this.get(userId, id);
  }

  async get(userId: number, id: string): Promise<StoredConversation> {
    const found = await this.conversations.find(userId, id);
    if (!found) throw notFound(id);
    return found;
  }

  async update(userId: number, id: string, metadata: Record<string, string>): Promise<StoredConversation> {
    const updated = await this.conversations.setMetadata(userId, id, metadata);
    if (!updated) throw notFound(id);
    return updated;
  }

  async delete(userId: number, id: string, signal?: AbortSignal): Promise<void> {
    if (!(await this.chat.delete(userId, id, signal))) throw notFound(id);
  }

  /** A page of the conversation's items in `order`; `after` names an item of it. */
  async items(userId: number, id: string, query: ItemPageQuery): Promise<ItemPage> {
    const conversation = await this.get(userId, id);
    // An item is at most two of a row's (a thought and its message): this many rows hold the page and one more.
    const rows =
      query.after === undefined
        ? ((await this.conversations.rows(conversation.id, { order: query.order, limit: query.limit + 2 })) ?? [])
        : await this.rowsFrom(conversation, query);
    return pageOf(
      rows.flatMap((row) => (query.order === "asc" ? rowItems(row) : rowItems(row).toReversed())),
      query,
      "this conversation",
    );
  }

  private async rowsFrom(conversation: StoredConversation, { order, after, limit }: ItemPageQuery): Promise<ConversationRow[]> {
    for (const from of rowIdsOf(after!)) {
      const rows = await this.conversations.rows(conversation.id, { order, from, limit: limit + 2 });
      if (rows?.flatMap(rowItems).some((item) => item.id === after)) return rows;
    }
    throw new InvalidInput({ part: "pageAfter" }, `no item ${JSON.stringify(after)} in this conversation`);
  }

  /** Adds items at the end of the conversation, after its running turn. */
  async add(userId: number, id: string, items: ItemInput[], signal?: AbortSignal): Promise<ConversationItem[]> {
    const stored = inputItems(newStem(), items);
    const added = await this.chat.exclusive(userId, id, signal, (conversation) => this.conversations.addMessages(conversation, itemRows(stored)));
    if (!added) throw notFound(id);
    return stored;
  }

  async item(userId: number, id: string, itemId: string): Promise<ConversationItem> {
    const conversation = await this.get(userId, id);
    for (const rowId of rowIdsOf(itemId)) {
      const row = await this.conversations.row(conversation.id, rowId);
      const item = row && rowItems(row).find((candidate) => candidate.id === itemId);
      if (item) return item;
    }
    throw new NotFound(`no item ${JSON.stringify(itemId)} in this conversation`);
  }

  /**
   * Deletes one item (a thought alone leaves its message), and what the engine cached of the
   * conversation: it holds the item's text. Returns the conversation.
   */
  async deleteItem(userId: number, id: string, itemId: string, signal?: AbortSignal): Promise<StoredConversation> {
    await this.item(userId, id, itemId);
    const deleted = await this.chat.exclusive(userId, id, signal, async (conversation) => {
      // An item of its own row, else a thought kept with its message (`rowIdsOf`).
      const [own, message] = rowIdsOf(itemId);
      const gone = (await this.conversations.row(conversation.id, own!))
        ? await this.conversations.deleteRow(conversation.id, own!, false)
        : message !== undefined && (await this.conversations.deleteRow(conversation.id, message, true));
      if (gone) await this.engines.forget(String(conversation.id));
      return gone ? conversation : undefined;
    });
    if (!deleted) throw new NotFound(`no item ${JSON.stringify(itemId)} in this conversation`);
    return deleted;
  }
}
