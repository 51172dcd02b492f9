-- GET /v1/notifications counts from the indexes alone
--
-- Its total_count was one statement for both lists (`not unread_only or not n.read`), so even
-- the list of all notifications read each row's `read` from the table. Now the unread list's
-- total is the badge's count (app.my_unread_notifications, computed once for both members), and
-- the whole list's a statement that names no `read`: an index-only count. A member with 100,000
-- unread notifications in a table of 1.1 million: 20.7 -> 12.9 ms a page (docs/performance.md,
-- "Sixth round"). Same answers.

-- The diff lists functions by name, so a SQL function may come before one it calls: its body
-- is checked once everything is in place (by test/schema.test.ts), not statement by statement.
set local check_function_bodies = off;

-- api.notifications_list: supabase/schemas/90_notifications.sql
CREATE OR REPLACE FUNCTION api.notifications_list (
  unread_only    boolean,
  page_limit     integer,
  starting_after text
)
  RETURNS jsonb
  LANGUAGE plpgsql
  STABLE
  SET search_path TO ''
  AS $function$
declare
  me uuid := (select auth.uid());
  anchor app.notifications;
  page uuid[];
  has_more boolean;
  base_url text := app.public_url();
  unread bigint := app.my_unread_notifications();
  total bigint;
begin
  if starting_after is not null then
    select n.* into anchor from app.notifications n
    where n.id = app.from_public_id('notif', starting_after) and n.user_id = me and not n.hidden;
    if anchor.id is null or (unread_only and anchor.read) then
      perform app.http_error(404, format('starting_after: %L is not a notification of this list.', starting_after));
    end if;
  end if;
  page := array(
    select n.id from app.notifications n
    where n.user_id = me and not n.hidden and (not unread_only or not n.read)
      and (anchor.id is null or (n.created_at, n.id) < (anchor.created_at, anchor.id))
    order by n.created_at desc, n.id desc
    limit page_limit + 1);
  has_more := cardinality(page) > page_limit;
  page := page[1:page_limit];
  -- Counted from the indexes alone: the unread ones are the badge's count; all of them a
  -- statement of its own that names no `read` (one statement for both read each row's `read`
  -- from the table: 30.8 ms a page at 100,000 notifications, docs/performance.md).
  if unread_only then
    total := unread;
  else
    total := (select count(*) from app.notifications n where n.user_id = me and not n.hidden);
  end if;
  return app.page_envelope(
    -- The text is what the notification is about as it is now, read as the member (the todos
    -- and comments policies): an edit shows the edited text, and a todo or comment the member
    -- may no longer see (its author turned private, a follower removed) shows none. The stored
    -- excerpt is what the push carried when the notification was written.
    (select jsonb_agg(app.notification_json(n, u, base_url)
                      || jsonb_build_object('text', case when n.comment_id is not null then app.notification_excerpt(c.body)
                                                         when n.todo_id is not null then app.notification_excerpt(t.body)
                                                         else n.text end)
                      order by array_position(page, n.id))
     from app.notifications n
     left join app.users u on u.id = n.actor_id
     left join app.todos t on t.id = n.todo_id
     left join app.comments c on c.id = n.comment_id
     where n.id = any (page)),
    has_more,
    total,
    app.to_public_id('notif', page[cardinality(page)]))
    || jsonb_build_object('unread_count', unread);
end;
$function$;
