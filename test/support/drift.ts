// Every stored counter against a recount, for the tests that hurt the database on purpose (races,
// the fuzzer, account deletion): the same list everywhere, so a counter added to the schema is
// added here once and every such test checks it (issue 31: the fuzzer's list had left out the
// streaks, chat and the per-privacy totals).
import type { Sql } from 'postgres'

/** Every stored counter that differs from a recount, by name (zero everywhere when consistent). */
export async function counterDrift(sql: Sql<any>) {
  const [drift] = await sql`
    select
      (select count(*) from app.todos t where t.reactions_count <> (select count(*) from app.reactions r where r.todo_id = t.id))::int as todo_reactions,
      (select count(*) from app.todos t where t.comments_count <> (select count(*) from app.comments c where c.todo_id = t.id))::int as todo_comments,
      (select count(*) from app.comments c where c.reactions_count <> (select count(*) from app.reactions r where r.comment_id = c.id))::int as comment_reactions,
      (select count(*) from app.users u where u.followers_count <> (select count(*) from app.user_follows f where f.followee_id = u.id))::int as user_followers,
      (select count(*) from app.users u where u.todos_count <> (select count(*) from app.todos t where t.user_id = u.id))::int as user_todos,
      (select count(*) from app.projects p where p.followers_count <> (select count(*) from app.project_follows f where f.project_id = p.id))::int as project_followers,
      -- A project's todos per author (issue 28: the Project's todos_count).
      (select count(*) from app.project_todo_counts c
        full join (select project_id, user_id, count(*) as n from app.todos where project_id is not null group by 1, 2) r
          on r.project_id = c.project_id and r.user_id = c.user_id
        where coalesce(c.todos, 0) <> coalesce(r.n, 0))::int as project_todos,
      (select count(*) from (
         select privacy, sum(todos) as todos from app.todo_totals group by privacy
       ) totals where totals.todos <> (select count(*) from app.todos t where t.author_privacy = totals.privacy))::int as totals_by_privacy,
      ((select coalesce(sum(todos), 0) from app.todo_totals) <> (select count(*) from app.todos))::int as totals,
      -- The inbox order: a conversation's latest activity is its newest message.
      (select count(*) from app.conversation_members m
        where m.last_message_at is distinct from (select max(x.created_at) from app.messages x where x.conversation_id = m.conversation_id))::int as inbox_last_message,
      (select count(*) from app.conversations c
        where c.last_message_at is distinct from (select max(x.created_at) from app.messages x where x.conversation_id = c.id))::int as conversation_last_message,
      -- The privacy copies the policies and the comment totals read (author_privacy).
      (select count(*) from app.todos t join app.users u on u.id = t.user_id where t.author_privacy <> u.privacy)::int as todo_author_privacy,
      (select count(*) from app.comments c join app.users u on u.id = c.user_id where c.author_privacy <> u.privacy)::int as comment_author_privacy,
      -- A conversation's messages (the total_count of its messages' pages).
      (select count(*) from app.conversations c
        where c.messages_count <> (select count(*) from app.messages x where x.conversation_id = c.id))::int as conversation_messages,
      -- Unread: the newest message of a conversation is the other participant's and came after
      -- the member last read, or the flag is off. Only the newest message is compared: it is the
      -- one whose arrival set the flag last.
      (select count(*) from app.conversation_members m
        join lateral (select x.user_id, x.created_at from app.messages x where x.conversation_id = m.conversation_id
                      order by x.created_at desc, x.id desc limit 1) newest on true
        where newest.user_id = m.user_id and m.unread)::int as unread_after_own_message,
      -- Read: a member whose side is not unread has read (or written) past every message of the
      -- other participant: none is dated after their last read (issue 31: a read marked read a
      -- message delivered while it waited, one the reader never saw).
      (select count(*) from app.conversation_members m
        where not m.unread and exists (select 1 from app.messages x where x.conversation_id = m.conversation_id
                                         and x.user_id <> m.user_id and x.created_at > coalesce(m.last_read_at, '-infinity')))::int as read_before_newest,
      -- The sealed hours of the date filters (issue 26): each privacy's todos of each hour.
      (select count(*) from app.todo_hours h
        full join (select t.author_privacy as privacy, date_trunc('hour', t.created_at, 'UTC') as hour, count(*) as n
                     from app.todos t where t.created_at < (select s.until from app.todo_hours_sealed s) group by 1, 2) r
          on r.privacy = h.privacy and r.hour = h.hour
        where coalesce(h.todos, 0) <> coalesce(r.n, 0))::int as sealed_hours`
  return drift
}

/** Streaks are stored (app.users.streak_*); a recount is app.refresh_streak from the history. */
const recountOnly = new Error('recount only')
export async function streakDrift(sql: Sql<any>): Promise<string[]> {
  const drifted: string[] = []
  await sql.begin(async (tx) => {
    const before = await tx`select id, username, streak_length, streak_last_day::text, best_streak from app.users order by id`
    await tx`select app.refresh_streak(id) from app.users`
    const after = await tx`select id, username, streak_length, streak_last_day::text, best_streak from app.users order by id`
    before.forEach((row, i) => {
      if (JSON.stringify(row) !== JSON.stringify(after[i])) drifted.push(`${row.username}: ${JSON.stringify(row)} → ${JSON.stringify(after[i])}`)
    })
    // A recount only: roll back, leaving the stored values as the triggers made them.
    throw recountOnly
  }).catch((error) => {
    if (error !== recountOnly) throw error
  })
  return drifted
}

/** counterDrift's answer when every counter equals its recount. */
export const NO_DRIFT = {
  todo_reactions: 0, todo_comments: 0, comment_reactions: 0, user_followers: 0, user_todos: 0, project_followers: 0, project_todos: 0,
  totals_by_privacy: 0, totals: 0, inbox_last_message: 0, conversation_last_message: 0, conversation_messages: 0, todo_author_privacy: 0, comment_author_privacy: 0, unread_after_own_message: 0, read_before_newest: 0,
  sealed_hours: 0,
}

