/** The contract's rule for a `conversation_id`: the chat body's and the listing filter's alike. */
export const CONVERSATION_ID = /^(?!:)[A-Za-z0-9._:-]{1,128}$/;

export const CONVERSATION_ID_RULE = "conversation_id must be 1 to 128 characters of A-Z a-z 0-9 . _ : - not starting with :";
