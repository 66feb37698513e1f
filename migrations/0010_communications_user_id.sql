-- An inbound message's business-scoped user id (see 0009) also goes on the contact's communication row.
ALTER TABLE contact_communications ADD COLUMN from_user_id text;
