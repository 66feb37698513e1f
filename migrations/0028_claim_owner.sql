-- Who claimed a sending recipient (the claiming process's liveness id, src/db/process-liveness.ts)
-- and when its send is slotted: the worker that takes a number over from a dead or cut-off one puts
-- back at once the claims whose slot lies past the old owner's fence (they were never sent), and a
-- worker records an unsent claim back to pending only while the claim is still its own.
ALTER TABLE campaign_recipients ADD COLUMN claimed_by uuid, ADD COLUMN send_at timestamptz;
